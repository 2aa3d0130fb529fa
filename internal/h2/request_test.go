package h2

import (
	"net/url"
	"testing"
)

// TestParseRequestURI: the server's parse of :path, which skips
// url.ParseRequestURI's allocation for a plain path, gives the URL (or
// the error) ParseRequestURI gives, for every byte in every position
// that matters and for the shapes of query it takes apart.
func TestParseRequestURI(t *testing.T) {
	t.Parallel()
	paths := []string{"A://@", "a://u:p@h/x", "/", "//", "///a", "/a/b/c", "/a?", "/a??", "/a?b?", "/a?b=c&d", "/?", "?", "", "*", "a", "a:b", "/a#b", "/a%2Fb", "/a%zz", "/%", "/é", "/a b", "/a?b c", "/a?\x7f", "/a?é"}
	for c := 0; c < 256; c++ {
		s := string([]byte{byte(c)})
		paths = append(paths, "/"+s, "/a"+s+"b", "/a?"+s, s+"/a")
	}
	for _, p := range paths {
		want, wantErr := url.ParseRequestURI(p)
		var u url.URL
		got, err := parseRequestURI(&u, p)
		if (err != nil) != (wantErr != nil) || err == nil && !sameURL(got, want) {
			t.Errorf("%q: got %+v, %v; ParseRequestURI %+v, %v", p, got, err, want, wantErr)
		}
	}
}

// sameURL reports whether a and b are the same URL: field by field, with
// the userinfo compared by what it holds (ParseRequestURI allocates one
// for each parse, so two parses of "x://@" differ as pointers).
func sameURL(a, b *url.URL) bool {
	ac, bc := *a, *b
	ac.User, bc.User = nil, nil
	if ac != bc || (a.User == nil) != (b.User == nil) {
		return false
	}
	return a.User == nil || *a.User == *b.User
}

// FuzzParseRequestURI compares the server's parse of :path with
// url.ParseRequestURI's for arbitrary paths.
func FuzzParseRequestURI(f *testing.F) {
	for _, p := range []string{"/", "/a/b?c=d", "/a?", "//x", "/a%20b", "/é?é"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		want, wantErr := url.ParseRequestURI(p)
		var u url.URL
		got, err := parseRequestURI(&u, p)
		if (err != nil) != (wantErr != nil) || err == nil && !sameURL(got, want) {
			t.Errorf("%q: got %+v, %v; ParseRequestURI %+v, %v", p, got, err, want, wantErr)
		}
	})
}
