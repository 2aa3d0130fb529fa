package policy

import (
	"net/url"
	"path"
	"strings"
	"testing"
	"unicode"
)

var fuzzSeeds = []string{
	"/", "/admin", "//admin", "/a/../admin", "/%2e%2e/admin", "/x/%252e%252e/admin", "/admin%2f",
	"/admin;x", "/admin.", `\admin`, "/a/..;/admin", "/%zz", "/admin/health/..", "/%2561dmin/x",
	`/admin/x\y/..`, "/admin/.../..", `/admin\...\..`, "/admin/x;/..", "/ADMIN", "/%41dmin/X",
	"/admin%3Fx", "/admin%23/x", "/admin%00.png", "/admin%09", "/%0d%0aadmin/x", "/admin%a0",
	"/admin%C2%A0", "/x/..%09/admin", "/admin%09.", "/admin%E3%80%80/x", "/%E2%80%8Badmin",
}

// FuzzClean checks the invariants of a cleaned path.
func FuzzClean(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := Clean(p)
		if !strings.HasPrefix(c, "/") {
			t.Fatalf("Clean(%q) = %q: not absolute", p, c)
		}
		if Clean(c) != c {
			t.Fatalf("Clean not idempotent: %q -> %q -> %q", p, c, Clean(c))
		}
		if c != "/" && strings.HasSuffix(c, "/") {
			t.Fatalf("Clean(%q) = %q: trailing slash", p, c)
		}
		for _, s := range strings.Split(c[1:], "/") {
			if c != "/" && (s == "" || s == "." || s == ".." || strings.ContainsAny(s, `;\`) || strings.HasSuffix(s, ".") || strings.HasSuffix(s, " ") || refTrimSpace(s) != s) {
				t.Fatalf("Clean(%q) = %q: segment %q survived", p, c, s)
			}
		}
	})
}

// refMatch is the reference matcher: segment lists, no string tricks.
func refMatch(pattern, cleaned string) bool {
	ps := segments(pattern)
	cs := segments(cleaned)
	if len(ps) > 0 && ps[len(ps)-1] == "*" {
		ps = ps[:len(ps)-1]
		if len(cs) < len(ps) {
			return false
		}
		cs = cs[:len(ps)]
	}
	if len(ps) != len(cs) {
		return false
	}
	for i := range ps {
		if ps[i] != cs[i] {
			return false
		}
	}
	return true
}

func segments(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

var fuzzPatterns = []string{"/admin", "/admin/*", "/*", "/", "/a/b", "/a/b/*", "/x"}

// FuzzMatch checks Decide against the reference matcher on cleaned paths,
// for a rule list picked by the fuzzer.
func FuzzMatch(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, "GET", uint16(i*7))
	}
	f.Fuzz(func(t *testing.T, p, method string, pick uint16) {
		var rules []Rule
		for i := 0; i < 3; i++ {
			j := int(pick>>(i*5)) & 31
			if j >= 2*len(fuzzPatterns) {
				continue
			}
			act := Allow
			if j%2 == 1 {
				act = Deny
			}
			rules = append(rules, Rule{Action: act, Path: fuzzPatterns[j/2]})
		}
		if len(rules) > 0 && pick&0x8000 != 0 {
			rules[0].Methods = []string{"get"}
		}
		c := Clean(p)
		got, gi := Decide(rules, method, c)
		want, wi := true, -1
		for i, r := range rules {
			mOK := len(r.Methods) == 0 || strings.EqualFold(method, "GET") || strings.EqualFold(method, "HEAD")
			if mOK && refMatch(r.Path, c) {
				want, wi = r.Action == Allow, i
				break
			}
		}
		if got != want || gi != wi {
			t.Fatalf("rules %+v, %s %q (clean %q): Decide = %v,%d; reference %v,%d", rules, method, p, c, got, gi, want, wi)
		}
	})
}

// FuzzNoBypass checks that no encoding walks around a deny: whenever a
// host's own reading of the raw path (as sent, or decoded once by
// net/url, and that ending at a decoded NUL, '?' or '#'; with `\` as a
// separator or not; with each segment's ";params" and trailing dots and
// spaces or without, as Tomcat and IIS drop them; with white space and
// controls at a segment's ends, or without, as Java's, JS's, Python's and
// .NET's trims drop them, of UTF-8 runes or of Latin-1 bytes; with case or without;
// then path.Clean, or, for a path as written, only empty and "." segments
// removed, as a host that keeps ".." reads it) falls under a deny rule,
// Check denies.
func FuzzNoBypass(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, uint8(i))
		f.Add(s, uint8(0)) // under /admin
		f.Add(s, uint8(1)) // under /admin/*
	}
	f.Fuzz(func(t *testing.T, raw string, pick uint8) {
		pattern := fuzzPatterns[int(pick)%len(fuzzPatterns)]
		rules := []Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: pattern}}
		if pick&0x80 != 0 {
			rules = rules[1:]
		}
		var views []string
		add := func(p string) {
			for _, b := range []string{p, strings.ReplaceAll(p, `\`, "/")} {
				var qs []string
				for _, ws := range []func(string) string{nil, refTrimSpace, latin1Trim} {
					for _, pt := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
						qs = append(qs, segTrim(b, pt[0], pt[1], ws))
					}
				}
				for _, q := range qs {
					for _, r := range []string{q, strings.ToLower(q)} {
						views = append(views, path.Clean("/"+r))
						if q == b {
							views = append(views, dotsKept(r))
						}
					}
				}
			}
		}
		add(raw)
		if dec, err := url.PathUnescape(raw); err == nil {
			add(dec)
			if i := strings.IndexAny(dec, "\x00?#"); i >= 0 {
				add(dec[:i]) // a host that ends the decoded path there
			}
		}
		for _, v := range views {
			allowedByRef := true
			for _, r := range rules {
				if refMatch(r.Path, v) {
					allowedByRef = r.Action == Allow
					break
				}
			}
			if allowedByRef {
				continue
			}
			if ok, _ := Check(rules, "GET", raw); ok {
				t.Fatalf("rules %+v: %q reads as %q, which is denied, but Check allowed it", rules, raw, v)
			}
		}
	})
}

// dotsKept is p read by a host that does not remove ".." segments.
func dotsKept(p string) string {
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/")
}

// segTrim is p with each segment's ";params" suffix (params), then the
// white space at its ends (ws, if not nil), then its trailing dots and
// spaces (trailing) dropped, written without path.Clean's help.
func segTrim(p string, params, trailing bool, ws func(string) string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ';'); j >= 0 && params {
			s = s[:j]
		}
		if ws != nil {
			s = ws(s)
		}
		if s != "." && s != ".." && trailing {
			s = strings.TrimRight(s, ". ")
		}
		segs[i] = s
	}
	return strings.Join(segs, "/")
}

// refTrimSpace is s trimmed as each language's trim reads it, the union of
// their sets, listed language by language.
func refTrimSpace(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		javaTrim := r <= 0x20
		javaStrip := r != 0xa0 && r != 0x2007 && r != 0x202f && (unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp) || strings.ContainsRune("\t\n\v\f\r\x1c\x1d\x1e\x1f\u180e", r))
		js := unicode.Is(unicode.Zs, r) || strings.ContainsRune("\t\n\v\f\r\u00a0\ufeff\u2028\u2029\u180e", r)
		python := unicode.Is(unicode.Zs, r) || strings.ContainsRune("\t\n\v\f\r\x1c\x1d\x1e\x1f\u0085\u2028\u2029", r)
		dotnet := unicode.Is(unicode.White_Space, r) || r == 0x200b || r == 0xfeff
		return javaTrim || javaStrip || js || python || dotnet || r == 0x7f
	})
}

// latin1Trim is s trimmed by a host that reads its bytes as Latin-1 and
// trims C0 controls, space, DEL, NEL and NBSP.
func latin1Trim(s string) string {
	trim := func(c byte) bool { return c <= 0x20 || c == 0x7f || c == 0x85 || c == 0xa0 }
	for s != "" && trim(s[0]) {
		s = s[1:]
	}
	for s != "" && trim(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
