package gatehouse

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEPackageMap: the README's package map names every package of
// the binary, so a reader who follows a log line or an import to a
// package finds what it owns. Test helpers are no part of the binary.
func TestREADMEPackageMap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range goList(t, "Imports", "../../internal/...", "../../cmd/...", "../../host") {
		if strings.HasPrefix(pkg, "internal/testutil") || strings.HasSuffix(pkg, "test") {
			continue
		}
		if !strings.Contains(string(readme), "`"+pkg+"`") {
			t.Errorf("README.md's package map does not name %s", pkg)
		}
	}
}
