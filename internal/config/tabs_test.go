package config

import (
	"path/filepath"
	"testing"
)

// TestFileWithTabs: YAML takes no tab for indentation, which an editor
// set to tabs writes. The parser's word for it quoted the tab itself, an
// invisible character in a one-line error ("found character '	' that
// cannot start any token"); it is said in words, with the line, and what
// to do.
func TestFileWithTabs(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"indented section", "http:\n\taddr: \":1\"\n", "[2:1] a tab, which YAML does not take for indentation: indent with spaces"},
		{"indented list entry", "clusters:\n  - id: x\n\t url: y\n", "[3:1] a tab, which YAML does not take for indentation: indent with spaces"},
		{"before a key in braces", "http: {addr: \":1\",\tmode: serve}\n", "[1:23] a tab before a key, which YAML does not take there: use spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gatehouse.yaml")
			writeFile(t, path, tc.file)
			_, err := Load([]string{"-config", path}, nil)
			if want := "config: " + path + ": " + tc.want; err == nil || err.Error() != want {
				t.Errorf("got %q\nwant %q", err, want)
			}
		})
	}
}
