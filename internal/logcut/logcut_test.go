package logcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"fits", "GET", 64, "GET"},
		{"exactly the bound", strings.Repeat("a", 64), 64, strings.Repeat("a", 64)},
		{"one past", strings.Repeat("a", 65), 64, strings.Repeat("a", 64-len("...[truncated from 65 bytes]")) + "...[truncated from 65 bytes]"},
		{"cut before a character", "/" + strings.Repeat("é", 40), 64, "/" + strings.Repeat("é", 17) + "...[truncated from 81 bytes]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := String(tt.s, tt.n)
			if got != tt.want {
				t.Errorf("String(%d bytes, %d) = %q, want %q", len(tt.s), tt.n, got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("String cut a character: %q", got)
			}
		})
	}
	if a := testing.AllocsPerRun(100, func() { _ = Path("/a/path/that/fits") }); a != 0 {
		t.Errorf("a value that fits allocates %v times", a)
	}
}
