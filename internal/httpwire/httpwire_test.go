package httpwire

import (
	"strconv"
	"strings"
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

func TestIndexLineBreak(t *testing.T) {
	for _, v := range []string{"", "a", "text/plain; charset=utf-8", "a\rb", "a\nb", "\r", "ab\n", "\t\v\f x", "a\x00\x0c\x0e", "\x0b\x0d", "x\x0a\x0d"} {
		if got, want := IndexLineBreak(v), strings.IndexAny(v, "\r\n"); got != want {
			t.Errorf("IndexLineBreak(%q) = %d, want %d", v, got, want)
		}
	}
}

var headerValues = []string{"text/plain; charset=utf-8", "1024", "Tue, 01 Dec 2026 15:20:00 GMT", "GHAAAAAAAAAAAAB", "127.0.0.1", "1000000000", "\"default\";q=1000000000;w=60"}

func BenchmarkIndexLineBreak(b *testing.B) {
	b.Run("IndexLineBreak", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			n += IndexLineBreak(headerValues[i%len(headerValues)])
		}
		sinkInt = n
	})
	b.Run("strings.IndexAny", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			n += strings.IndexAny(headerValues[i%len(headerValues)], "\r\n")
		}
		sinkInt = n
	})
}

var sinkInt int
