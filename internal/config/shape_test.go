package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigShapeIsBounded: the YAML library's parser costs the square of
// a file's nesting depth, and of the keys in one mapping, so a file of
// 1 MiB nested 500,000 deep ([[[[…) took over 20 GB before its first
// error, and one of 100,000 top-level keys two minutes. Such a file is
// refused before it is parsed, naming the line where it goes past the
// bound; the cases are kept small here, as the unbounded parse of a large
// one would take the machine's memory.
func TestConfigShapeIsBounded(t *testing.T) {
	// nestedComplex(n) is n mappings, each the value of a "? k" key.
	nestedComplex := func(n int) string {
		var b strings.Builder
		for i := range n {
			in := strings.Repeat("  ", i)
			b.WriteString(in + "? k\n" + in + ":\n")
		}
		return b.String()
	}
	indented := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.Repeat(" ", i) + "k:\n")
		}
		return b.String()
	}
	keys := func(n int, format string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.ReplaceAll(format, "N", fmt.Sprintf("k%d", i)))
		}
		return b.String()
	}
	tooDeep := "nested more than 32 levels deep; a configuration file nests 4"
	for _, tc := range []struct{ name, file, want string }{
		{"flow sequences", "zone: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n", "line 1: " + tooDeep},
		{"flow mappings", "zone: " + strings.Repeat("{a: ", 40) + "1" + strings.Repeat("}", 40) + "\n", "line 1: " + tooDeep},
		{"block sequences", "zone:\n" + strings.Repeat("- ", 40) + "x\n", "line 2: " + tooDeep},
		{"indentation", indented(40), "line 33: " + tooDeep},
		{"top-level keys", keys(300, "N: 1\n"), "line 257: a mapping of more than 256 keys; a configuration file's largest holds about 20"},
		{"flow mapping keys", "zone: {" + keys(300, "N: 1, ") + "}\n", "line 1: a mapping of more than 256 keys; a configuration file's largest holds about 20"},
		// "? key" then ": value" on the next line: 1 MiB of them took the
		// parser a minute, counted as no key.
		{"complex keys", keys(300, "? N\n: 1\n"), "line 513: a mapping of more than 256 keys; a configuration file's largest holds about 20"},
		{"complex keys nested", nestedComplex(40), "line 65: " + tooDeep},
		{"complex keys without values", keys(300, "? N\n"), "line 257: a mapping of more than 256 keys; a configuration file's largest holds about 20"},
		{"complex keys among keys", keys(150, "? N\n: 1\nxN: 1\n"), "line 385: a mapping of more than 256 keys; a configuration file's largest holds about 20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gatehouse.yaml")
			writeFile(t, path, tc.file)
			_, err := Load([]string{"-config", path}, nil)
			if want := "config: " + path + ": " + tc.want; err == nil || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
	// At the bounds, a file loads (here to its first unknown key).
	for _, tc := range []struct{ name, file, want string }{
		{"32 levels", "clusters: " + strings.Repeat("[", 31) + strings.Repeat("]", 31) + "\n", `clusters[0]: `},
		{"256 keys", keys(256, "N: 1\n"), `unknown key "k0"`},
		{"256 complex keys", keys(256, "? N\n: 1\n"), `unknown key "k0"`},
		{"complex keys nested 31 deep", nestedComplex(31), `unknown key "k"`},
		{"a thousand peers", "clusters:\n" + keys(1000, "  - {id: N, url: 'https://N.example', public_key: x}\n"), "clusters[0].public_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gatehouse.yaml")
			writeFile(t, path, tc.file)
			_, err := Load([]string{"-config", path}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant an error holding %s", err, tc.want)
			}
		})
	}
}
