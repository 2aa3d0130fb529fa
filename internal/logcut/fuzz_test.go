package logcut

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzString: whatever s and n, String gives s itself when it fits in n
// bytes, or else a prefix of s and the marker naming len(s), within n
// bytes unless n is under the marker itself (then the marker alone). The
// prefix is cut before a character, so a valid s gives a valid line, and
// is as long as that allows: a valid s loses at most a character's
// first 3 bytes beyond the marker's room.
func FuzzString(f *testing.F) {
	f.Add("GET", 64)
	f.Add(strings.Repeat("a", 64), 64)
	f.Add(strings.Repeat("a", 65), 64)
	f.Add("/"+strings.Repeat("é", 40), 64)
	f.Add(strings.Repeat("😀", 30), 64)
	f.Add(strings.Repeat("\x80", 100), 64)
	f.Add("ab\xf0\x9f", 2)
	f.Add("abcd", 2)
	f.Add("", 0)
	f.Add("x", -1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		out := String(s, n)
		if len(s) <= n {
			if out != s {
				t.Fatalf("String(%q, %d) = %q; it fits, want it as is", s, n, out)
			}
			return
		}
		marker := "...[truncated from " + strconv.Itoa(len(s)) + " bytes]"
		prefix, ok := strings.CutSuffix(out, marker)
		if !ok || !strings.HasPrefix(s, prefix) {
			t.Fatalf("String(%q, %d) = %q; want a prefix of s and %q", s, n, out, marker)
		}
		if len(out) > max(n, len(marker)) {
			t.Fatalf("String(%d bytes, %d) = %d bytes, past max(n, marker) = %d", len(s), n, len(out), max(n, len(marker)))
		}
		if !utf8.ValidString(s) {
			return
		}
		if !utf8.ValidString(out) {
			t.Fatalf("String(%q, %d) = %q: a character cut", s, n, out)
		}
		if room := n - len(marker); len(prefix) < room-(utf8.UTFMax-1) {
			t.Fatalf("String(%q, %d) kept %d bytes of s, room for %d", s, n, len(prefix), room)
		}
	})
}
