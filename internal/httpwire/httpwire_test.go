package httpwire

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
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
		if sn, sok := ParseLength(tt.in); sn != n || sok != ok {
			t.Errorf("ParseLength(string %q) = %d, %v; as bytes %d, %v", tt.in, sn, sok, n, ok)
		}
	}
}

func TestTrimOWS(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""}, {"a", "a"}, {" a ", "a"}, {"\t a b\t ", "a b"}, {" \t ", ""},
		{"\ra\n", "\ra\n"}, {"\va\f", "\va\f"}, {"a\u00a0", "a\u00a0"}, // only SP and HTAB are OWS
	} {
		if got := TrimOWS(tt.in); got != tt.want {
			t.Errorf("TrimOWS(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := TrimOWS([]byte(tt.in)); string(got) != tt.want {
			t.Errorf("TrimOWS([]byte(%q)) = %q, want %q", tt.in, got, tt.want)
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

// scanCases are values for the byte scanners: short and long, with the
// bytes each must find at every offset within a word and in the tail.
var scanCases = func() []string {
	vs := []string{"", "a", "text/plain; charset=utf-8", "a\rb", "a\nb", "\r", "ab\n", "\t\v\f x", "a\x00\x0c\x0e",
		"\x0b\x0d", "x\x0a\x0d", "tab\tinside a value", "\x7f", "caf\xc3\xa9 \xff\x80\x9f obs-text",
		strings.Repeat("\xff", 17), strings.Repeat("\t", 16), strings.Repeat(" ", 24) + "\x1f"}
	base := "session=0123456789abcdef; theme=dark"
	for i := range len(base) {
		for _, c := range []string{"\r", "\n", "\x00", "\x1f", "\x7f", "\t", "\x0e", "\x20", "\x80"} {
			vs = append(vs, base[:i]+c+base[i:])
		}
	}
	return vs
}()

func TestIndexLineBreak(t *testing.T) {
	for _, v := range scanCases {
		if got, want := IndexLineBreak(v), strings.IndexAny(v, "\r\n"); got != want {
			t.Errorf("IndexLineBreak(%q) = %d, want %d", v, got, want)
		}
		if got, want := IndexLineBreak([]byte(v)), strings.IndexAny(v, "\r\n"); got != want {
			t.Errorf("IndexLineBreak([]byte(%q)) = %d, want %d", v, got, want)
		}
	}
}

func TestValidValue(t *testing.T) {
	for _, v := range scanCases {
		if got, want := ValidValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Errorf("ValidValue(%q) = %v, want %v", v, got, want)
		}
		if got, want := ValidValue([]byte(v)), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Errorf("ValidValue([]byte(%q)) = %v, want %v", v, got, want)
		}
	}
}

// FuzzScan checks the word-at-a-time scanners against the byte-at-a-time
// definitions they replace: net/http's value rule and strings.IndexAny.
func FuzzScan(f *testing.F) {
	for _, v := range scanCases[:20] {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := ValidValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Fatalf("ValidValue(%q) = %v, want %v", v, got, want)
		}
		if got, want := IndexLineBreak(v), strings.IndexAny(v, "\r\n"); got != want {
			t.Fatalf("IndexLineBreak(%q) = %d, want %d", v, got, want)
		}
	})
}

var headerValues = []string{"text/plain; charset=utf-8", "1024", "Tue, 01 Dec 2026 15:20:00 GMT", "GHAAAAAAAAAAAAB", "127.0.0.1", "1000000000", "\"default\";q=1000000000;w=60",
	"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
	"session=4f1c2a9e7b3d4c5e8f6a0b1c2d3e4f5a; theme=dark; _ga=GA1.2.1234567890.1700000000; consent=necessary%2Canalytics"}

func BenchmarkIndexLineBreak(b *testing.B) {
	b.Run("IndexLineBreak", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			n += IndexLineBreak(headerValues[i%len(headerValues)])
		}
		sinkInt = n
	})
	b.Run("byte-loop", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			n += indexLineBreakBytewise(headerValues[i%len(headerValues)])
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

// indexLineBreakBytewise is IndexLineBreak as it was, a byte at a time:
// the benchmark's baseline.
func indexLineBreakBytewise(v string) int {
	for i := range len(v) {
		if c := v[i]; c <= '\r' && (c == '\r' || c == '\n') {
			return i
		}
	}
	return -1
}

// BenchmarkValidValue: the word-at-a-time check against httpguts's.
func BenchmarkValidValue(b *testing.B) {
	b.Run("ValidValue", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			if ValidValue(headerValues[i%len(headerValues)]) {
				n++
			}
		}
		sinkInt = n
	})
	b.Run("httpguts", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			if httpguts.ValidHeaderFieldValue(headerValues[i%len(headerValues)]) {
				n++
			}
		}
		sinkInt = n
	})
}
