package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRLFFileNamesTheRightLine: a file saved with Windows line ends
// (CRLF) is named by the line an editor shows. The YAML library's lexer
// counted a line twice after each comment and each quoted value running
// over lines, so a refusal past them named a line further down.
func TestCRLFFileNamesTheRightLine(t *testing.T) {
	var keys strings.Builder
	for i := range 300 {
		fmt.Fprintf(&keys, "k%d: 1\n", i)
	}
	head := "# gatehouse\n# edge gateway\nzone: \"apps.example.com\n  \"\n"
	for _, tc := range []struct{ name, file, want string }{
		{"syntax", head + "http: [\n", "[5:7] sequence end token ']' not found"},
		{"mapping of too many keys", head + keys.String(), "line 260: a mapping of more than 256 keys; a configuration file's largest holds about 20"},
		{"nested too deep", head + "http: " + strings.Repeat("[\n", 40), "line 36: nested more than 32 levels deep; a configuration file nests 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gatehouse.yaml")
			writeFile(t, path, strings.ReplaceAll(tc.file, "\n", "\r\n"))
			_, err := Load([]string{"-config", path}, nil)
			if want := "config: " + path + ": " + tc.want; err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
		})
	}
}
