package httpwire

import (
	"strconv"
	"testing"
)

func TestEqualFold(t *testing.T) {
	for _, tt := range []struct {
		b, s string
		want bool
	}{
		{"Content-Length", "content-length", true},
		{"CHUNKED", "chunked", true},
		{"chunked", "Chunked", true},
		{"chunked ", "chunked", false},
		{"chunkeD", "chunkex", false},
		{"", "", true},
		{"\xc4", "\xe4", false}, // not ASCII: no folding
	} {
		if got := EqualFold([]byte(tt.b), tt.s); got != tt.want {
			t.Errorf("EqualFold(%q, %q) = %v", tt.b, tt.s, got)
		}
	}
}

func TestParseLength(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int64
		want bool
	}{
		{"0", 0, true}, {"1024", 1024, true}, {"999999999999999999", 999999999999999999, true},
		{"", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1 ", 0, false}, {"0x10", 0, false},
		{"1000000000000000000", 0, false}, // 19 digits
	} {
		n, ok := ParseLength([]byte(tt.in))
		if ok != tt.want || (ok && n != tt.n) {
			t.Errorf("ParseLength(%q) = %d, %v", tt.in, n, ok)
		}
	}
}

func TestParseChunkSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"0", true}, {"1a", true}, {"FF", true}, {"7fffffffffffffff"[:15], true},
		{"", false}, {"g", false}, {"-1", false}, {"1;ext", false}, {"1234567890abcdef", false},
	} {
		n, ok := ParseChunkSize([]byte(tt.in))
		if ok != tt.want {
			t.Errorf("ParseChunkSize(%q) ok = %v", tt.in, ok)
			continue
		}
		if ok {
			if w, _ := strconv.ParseInt(tt.in, 16, 64); w != n {
				t.Errorf("ParseChunkSize(%q) = %d, want %d", tt.in, n, w)
			}
		}
	}
}
