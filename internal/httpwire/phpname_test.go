package httpwire

import (
	"net/url"
	"strings"
	"testing"
)

// TestPHPName: the names PHP 8's php_register_variable_ex gives $_GET's
// keys, as a PHP host reads them.
func TestPHPName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"_method", "_method"},
		{"access_token", "access_token"},
		{".method", "_method"},
		{"access.token", "access_token"},
		{" _method", "_method"},
		{"   access_token", "access_token"},
		{" method", "method"},
		{"a b.c", "a_b_c"},
		{"_method\x00", "_method"},
		{"_method\x00x", "_method"},
		{"\x00_method", ""},
		{"_method[]", "_method"},
		{"_method[x]", "_method"},
		{"_method[x", "_method_x"},
		{"_method[", "_method_"},
		{"[method", "_method"},
		{"a.b[c.d", "a_b_c.d"}, // renaming stops at an unclosed '['
		{"a.b[c]d", "a_b"},     // an array's name ends at its '['
		{"access[token", "access_token"},
		{"[]", ""},
		{"", ""},
	} {
		if got := PHPName(c.in); got != c.want {
			t.Errorf("PHPName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPHPNameAllocates(t *testing.T) {
	for _, k := range []string{"_method", "access_token", "_method[]", "  _method", "_method\x00x"} {
		if n := testing.AllocsPerRun(100, func() { _ = PHPName(k) }); n != 0 {
			t.Errorf("PHPName(%q): %v allocations, want 0 (nothing renamed)", k, n)
		}
	}
}

// TestPHPDecode: PHP's urldecode, which $_GET's names go through before
// PHPName: an escape without two hex digits stays as sent, the others
// decode, where url.QueryUnescape refuses the whole name.
func TestPHPDecode(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"_method", "_method"},
		{"%5Fmethod", "_method"},
		{"%5fmethod", "_method"},
		{"+_method", " _method"},
		{"_method%00%zz", "_method\x00%zz"},
		{"_method%00%", "_method\x00%"},
		{"_method%0", "_method%0"},
		{"%%41", "%A"},
		{"%zz%41", "%zzA"},
		{"%", "%"},
		{"", ""},
	} {
		if got := PHPDecode(c.in); got != c.want {
			t.Errorf("PHPDecode(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := PHPName(PHPDecode(c.in)); c.in == "_method%00%zz" && got != "_method" {
			t.Errorf("PHPName(PHPDecode(%q)) = %q, want _method", c.in, got)
		}
	}
	for _, k := range []string{"_method", "access_token"} {
		if n := testing.AllocsPerRun(100, func() { _ = PHPDecode(k) }); n != 0 {
			t.Errorf("PHPDecode(%q): %v allocations, want 0 (nothing to decode)", k, n)
		}
	}
}

// FuzzPHPName: PHPDecode reads every name url.QueryUnescape reads as it
// does (so no other framework's reading is lost to it), and PHPName's
// name holds no NUL, starts with no space and is never longer than what
// it was given.
func FuzzPHPName(f *testing.F) {
	for _, s := range []string{"_method", "%5Fmethod", "_method%00%zz", "a+b", "%", "%z", "%zz%41", "a.b[c.d", "[]", " x", "access[token"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := PHPDecode(s)
		if u, err := url.QueryUnescape(s); err == nil && u != d {
			t.Fatalf("PHPDecode(%q) = %q, url.QueryUnescape %q", s, d, u)
		}
		n := PHPName(d)
		if strings.IndexByte(n, 0) >= 0 || strings.HasPrefix(n, " ") || len(n) > len(d) {
			t.Fatalf("PHPName(%q) = %q", d, n)
		}
	})
}
