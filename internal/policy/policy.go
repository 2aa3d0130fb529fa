package policy

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Actions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// MaxDecode bounds the rounds of percent-decoding [Check] considers.
const MaxDecode = 4

// Rule is one ordered rule; it has the shape of route.PolicyRule, so a
// route rule converts with policy.Rule(r).
type Rule struct {
	Action  string   `json:"action"`
	Methods []string `json:"methods,omitempty"`
	Path    string   `json:"path"`
}

// Validate reports the first rule that cannot be applied as written: Check
// matches rules against requests' cleaned paths, so a rule that is not
// clean (an empty, '.' or '..' segment, a trailing '/' or '.', '%', ';',
// '\', white space, '?' or '#'; and "//*" would match "/" alone) would
// match no request, and a deny so written would let everything through.
// Nor may a segment start or end with a control or Unicode space: a host
// that trims them reads the path without, and the rule would match
// requests only as some hosts read them.
// It is the rule for a rule written now: route.PolicyRule.Check applies it
// for the API. The store applies [ValidateStored].
func Validate(rules []Rule) error {
	for i, r := range rules {
		if err := validateStored(i, r); err != nil {
			return err
		}
		if base := ruleBase(r.Path); Clean(base) != base {
			return fmt.Errorf("policy: rule %d: path %q has white space or a control character at either end of a segment, which a host that trims them reads without", i, r.Path)
		}
	}
	return nil
}

// ValidateStored is Validate but for a rule path with white space or a
// control at a segment's end, which it takes: such a path was valid before
// the spaces reading, and an app stored with one, refused on load, would
// vanish from routing after an upgrade. Check matches such a path as
// written, by every reading that keeps those characters, as it did.
// route.PolicyRule.CheckStored applies it for the store.
func ValidateStored(rules []Rule) error {
	for i, r := range rules {
		if err := validateStored(i, r); err != nil {
			return err
		}
	}
	return nil
}

func validateStored(i int, r Rule) error {
	if r.Action != Allow && r.Action != Deny {
		return fmt.Errorf("policy: rule %d: action must be %q or %q, got %q", i, Allow, Deny, r.Action)
	}
	for _, m := range r.Methods {
		if len(m) > maxMethod || !token(m) {
			return fmt.Errorf("policy: rule %d: %q is not a method", i, m)
		}
	}
	base := ruleBase(r.Path)
	if !strings.HasPrefix(r.Path, "/") || strings.Contains(r.Path, "//") || strings.ContainsAny(base, "*%\\; \t\r\n?#") || clean(base, lenientIn(base)&^spaces) != base {
		return fmt.Errorf("policy: rule %d: path %q must be a clean absolute path, optionally ending in /*", i, r.Path)
	}
	return nil
}

// ruleBase is a rule's path without its final "/*" ("/" for "/*").
func ruleBase(p string) string {
	if p == "/*" {
		return "/"
	}
	return strings.TrimSuffix(p, "/*")
}

// maxMethod bounds a rule's method, as the API bounds every token.
const maxMethod = 64

// Matches reports whether r covers method and the cleaned path p.
func (r Rule) Matches(method, p string) bool {
	return r.methodMatches(method) && pathMatches(r.Path, p)
}

// Named reports whether some rule of rules names method (or GET, for
// HEAD) among its methods. Every method no rule names is decided alike,
// by the rules that leave methods out or list "*", so a caller with many
// methods to check for one path need check only one of those.
func Named(rules []Rule, method string) bool {
	for _, r := range rules {
		for _, m := range r.Methods {
			if m != "*" && (strings.EqualFold(m, method) || (strings.EqualFold(method, "HEAD") && strings.EqualFold(m, "GET"))) {
				return true
			}
		}
	}
	return false
}

func (r Rule) methodMatches(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		// "*" is every method, as its writer meant: no request's method
		// is "*", so read literally a deny so written closed nothing.
		if m == "*" || strings.EqualFold(m, method) || (strings.EqualFold(method, "HEAD") && strings.EqualFold(m, "GET")) {
			return true
		}
	}
	return false
}

// pathMatches: "/x/*" covers /x and everything under it, "/*" everything,
// any other pattern exactly itself.
func pathMatches(pattern, p string) bool {
	if pattern == "/*" {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/*"); ok {
		return p == base || (strings.HasPrefix(p, base) && len(p) > len(base) && p[len(base)] == '/')
	}
	return p == pattern
}

// Decide applies rules, in order, to method and an already cleaned path:
// the first rule that matches decides. It returns whether the request is
// allowed and the index of the deciding rule, -1 for the default (allow).
func Decide(rules []Rule, method, cleaned string) (bool, int) {
	for i, r := range rules {
		if r.Matches(method, cleaned) {
			return r.Action != Deny, i
		}
	}
	return true, -1
}

// MaxWork and WorkPerByte bound the work of the checks of one request
// ([Work]): MaxWork bytes read, and WorkPerByte more for each byte of each
// path checked. An ordinary path takes a few passes over it per round of
// decoding, and sixteen where it holds every lenient reading; but a path
// whose every round of decoding brings out a '#' is read along a chain of
// cuts, and a header block of X-Original-URL values is many paths: 8 KiB
// of request target and 64 KiB of fields so built took half a second of a
// core. A request whose readings would take more is denied: the rules
// cannot be shown to allow it.
const (
	MaxWork     = 1 << 20
	WorkPerByte = 16
)

// Work is the work the checks of one request have taken, in bytes read
// by its readings, and its budget (MaxWork, and WorkPerByte for each byte
// of each path given to [CheckWork]). Deciding a reading counts too, as a
// byte per rule and per method of each rule, for each method decided:
// against an app of a hundred rules naming ten methods each, four
// override paths of 30 bytes read every way, for five methods, were
// 128 ms of a core, and read some 60 KB. The zero Work is a new
// request's.
type Work struct {
	used, budget int
	decision     int // the work of deciding one reading, for CheckWork's rules and methods
}

// Used returns the bytes read so far.
func (w *Work) Used() int { return w.used }

// spend adds n bytes read and reports whether the budget still holds.
func (w *Work) spend(n int) bool {
	w.used += n
	return w.used <= MaxWork+w.budget
}

// Check decides a request from its path as sent (the escaped path, e.g.
// url.URL.EscapedPath()): it is allowed only if every reading of the path
// (see the package doc) is. It returns the deciding rule of the first
// reading denied, or -1 (a request whose readings would take more than
// [MaxWork] is denied, with -1).
func Check(rules []Rule, method, escaped string) (bool, int) {
	var w Work
	return CheckWork(rules, []string{method}, escaped, &w)
}

// CheckWork is Check of escaped for each of methods (a request and the
// methods its override fields name), counting its work in w, which the
// checks of every path of one request share: the request is denied once
// they have taken more than w's budget. Each reading is made once and
// decided for every method: a check per method read the path anew as
// many times.
func CheckWork(rules []Rule, methods []string, escaped string, w *Work) (bool, int) {
	if len(rules) == 0 {
		return true, -1
	}
	w.budget += WorkPerByte * len(escaped)
	w.decision = 0
	for _, r := range rules {
		w.decision += 1 + len(r.Methods)
	}
	w.decision *= len(methods)
	return check(rules, methods, escaped, 0, w)
}

// decide is Decide of one reading for each of methods, spent from w: the
// first denied denies.
func decide(rules []Rule, methods []string, cleaned string, w *Work) (bool, int) {
	if !w.spend(w.decision) {
		return false, -1
	}
	for _, m := range methods {
		if ok, i := Decide(rules, m, cleaned); !ok {
			return false, i
		}
	}
	return true, -1
}

// check is Check of escaped as read after start rounds of decoding: it
// decodes it only MaxDecode-start more times, so that a chain of cuts
// (decode, cut at a '#', decode what is left, cut again) has MaxDecode
// rounds in all. Each cut starting its rounds afresh made the work
// double with every layer of encoding a path had. Each pass over a
// reading is spent from w.
func check(rules []Rule, methods []string, escaped string, start int, w *Work) (bool, int) {
	cur := escaped
	ruleKinds := foldIn(rules)
	var lowered []Rule // the rules for the folded reading, made when first needed
	for round := start; ; round++ {
		// pathEnd and lenientIn read cur once each.
		if !w.spend(2 * len(cur)) {
			return false, -1
		}
		if i := pathEnd(cur); i >= 0 {
			// A host written in C (or passing the path to one) reads a
			// decoded NUL as the path's end: /admin%00/x is /admin to it.
			// A host that decodes the path before it cuts off the query
			// and the fragment reads a decoded '?' or '#' so too: to a
			// PHP router's parse_url(urldecode($uri)), /admin%3Fx is
			// /admin. (The path as sent has neither: they are escaped.)
			// The part before holds none of the three, and is read on
			// from this round, so this recurses once per round that
			// brings one out (MaxDecode at most), each recursion with
			// fewer rounds left.
			if ok, i := check(rules, methods, cur[:i], round, w); !ok {
				return false, i
			}
		}
		kinds := lenientIn(cur) | ruleKinds
		if strings.Contains(cur, "..") {
			// Every reading below removes dot segments, as RFC 3986 has a
			// server do; many hosts do not (a prefix router, a handler
			// mounted under /admin/), and to them /admin/../x is under
			// /admin/. So ".." kept is a reading too, with `\` as a
			// separator or not, and folded.
			for _, p := range [...]string{cur, strings.ReplaceAll(cur, "\\", "/")} {
				if !w.spend(2 * len(p)) {
					return false, -1
				}
				k := keepDotDot(p)
				if ok, i := decide(rules, methods, k, w); !ok {
					return false, i
				}
				if kinds&folded != 0 {
					if lowered == nil {
						lowered = rules
						if ruleKinds != 0 {
							lowered = lowerRules(rules)
						}
					}
					if ok, i := decide(lowered, methods, fold(k), w); !ok {
						return false, i
					}
				}
			}
		}
		var cleaned [folded]string // this round's readings without folding, by m
		for m := 0; m <= allLenient; m++ {
			if m&^kinds != 0 {
				continue // the same reading as a smaller m
			}
			if !w.spend(len(cur)) {
				return false, -1
			}
			rs, c := rules, ""
			if m&folded == 0 {
				c = clean(cur, m)
				cleaned[m] = c
			} else {
				// m&^folded came earlier in this loop: fold what it cleaned.
				if lowered == nil {
					lowered = rules
					if ruleKinds != 0 {
						lowered = lowerRules(rules)
					}
				}
				rs, c = lowered, fold(cleaned[m&^folded])
			}
			if ok, i := decide(rs, methods, c, w); !ok {
				return false, i
			}
		}
		if round >= MaxDecode {
			return true, -1
		}
		if !w.spend(len(cur)) {
			return false, -1
		}
		next := unescape(cur)
		if next == cur {
			return true, -1
		}
		cur = next
	}
}

// The lenient readings a host may make of a path. Hosts differ in which
// they make, and each changes which segment a ".." removes or which rule
// a path falls under, so Check tries every combination: "/admin/x\y/.."
// is /admin to a host for which `\` is an ordinary byte and /admin/x to
// one for which it separates segments; /ADMIN is /admin to a host that
// compares paths without case (IIS, Windows and macOS file systems, many
// routers). A reading can only add a denial, never lift one.
const (
	backslash  = 1 << iota // `\` separates segments
	params                 // a segment's ";params" suffix is not part of its name
	trailing               // a segment's trailing dots and spaces are not part of its name
	spaces                 // a segment's leading and trailing white space and controls are not part of its name
	folded                 // letters compare without case; the highest bit, as check's cleaned array needs
	allLenient = backslash | params | trailing | spaces | folded
)

// foldIn reports folded if a rule's path has a letter that folding changes.
func foldIn(rules []Rule) int {
	for _, r := range rules {
		if unfolded(r.Path) {
			return folded
		}
	}
	return 0
}

// unfolded reports whether s has an upper-case ASCII letter or any
// non-ASCII byte (which Unicode case folding may change).
func unfolded(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' || c >= 0x80 {
			return true
		}
	}
	return false
}

// fold is s as a host that compares without case reads it: each letter
// upper-cased, then lower-cased. Lower-casing alone leaves letters whose
// upper case is an ASCII one: ASP.NET Core's routing and IIS
// (OrdinalIgnoreCase) and Java's equalsIgnoreCase compare upper-cased,
// and read dotless "ı" as "i" and long "ſ" as "s".
func fold(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, s)
		}
	}
	return strings.ToLower(s)
}

// lowerRules returns rules with their paths folded (fold).
func lowerRules(rules []Rule) []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		r.Path = fold(r.Path)
		out[i] = r
	}
	return out
}

// lenientIn reports the lenient readings that can change p: a `\`, a
// ';', a dot or space that ends a segment, white space or a control at a
// segment's end, a letter folding changes.
func lenientIn(p string) int {
	k := 0
	start := 0 // of the segment p[i] is in, taking `\` and ';' as ends too
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '/' || c == '\\' || c == ';' {
			k |= spacedEnds(p[start:i])
			start = i + 1
		}
		switch c := p[i]; {
		case c == '\\':
			k |= backslash
		case c == ';':
			k |= params
		case c == '.' || c == ' ':
			if i+1 == len(p) || p[i+1] == '/' || p[i+1] == '\\' || p[i+1] == ';' {
				k |= trailing
			}
		case 'A' <= c && c <= 'Z' || c >= 0x80:
			k |= folded
		}
	}
	return k | spacedEnds(p[start:])
}

// spacedEnds reports spaces if trimming white space (trimSpace) may change
// segment s: s starts or ends with it, or ends with it once its trailing
// dots and spaces are gone, as the trailing reading may leave it (".. " is
// ".." to the one, and empty to the other); and then trailing too if s so
// trimmed ends in a dot ("admin.\t").
func spacedEnds(s string) int {
	if s == "" {
		return 0
	}
	// Most segments begin and end in printable ASCII other than a dot:
	// nothing to trim at either end, before or after the trailing
	// reading, and no rune to decode.
	if c0, c1 := s[0], s[len(s)-1]; c0 > ' ' && c0 < 0x7f && c1 > ' ' && c1 < 0x7f && c1 != '.' {
		return 0
	}
	spaced := false
	for _, t := range [...]string{s, strings.TrimRight(s, ". ")} {
		if t == "" {
			break
		}
		r, n := utf8.DecodeRuneInString(t)
		r1, n1 := utf8.DecodeLastRuneInString(t)
		if spaceRune(r, n, t[0]) || spaceRune(r1, n1, t[len(t)-1]) {
			spaced = true
			break
		}
	}
	if !spaced {
		return 0
	}
	if t := trimSpace(s); t != "" && t[len(t)-1] == '.' {
		return spaces | trailing
	}
	return spaces
}

// space reports whether a host may trim r from the ends of a segment, as
// one that splits the path into segments and trims each (Spring's
// tokenizeToStringArray with trimTokens, CVE-2016-5007) or trims the name
// it looks up does. Each language trims its own set, and the union is
// read: Java's String.trim drops every char up to U+0020 (so every C0
// control), and strip and Character.isWhitespace the Unicode spaces but
// the no-break ones (and, before Java 9's Unicode 6.3, U+180E); .NET's Trim drops
// Char.IsWhiteSpace (Unicode White_Space: U+0085, U+00A0, the Zs spaces,
// U+2028, U+2029), and before .NET 4 U+200B and U+FEFF as well; JS's trim
// drops WhiteSpace and LineTerminator (U+FEFF, Zs, U+2028, U+2029, and
// U+180E in engines before Unicode 6.3); Python's strip drops
// str.isspace (U+001C-U+001F and U+0085 too). DEL goes with the
// controls: a host that trims controls drops it.
func space(r rune) bool {
	switch {
	case r <= ' ' || r == 0x7f:
		return true
	case r < 0x80:
		return false
	}
	return unicode.IsSpace(r) || r == '\u180e' || r == '\u200b' || r == '\ufeff'
}

// spaceRune is space for the rune r of n bytes that starts (or ends) with
// byte b, reading a byte that is not UTF-8 as Latin-1 does: a host that
// reads the path as Latin-1 reads %a0 as NBSP and %85 as NEL.
func spaceRune(r rune, n int, b byte) bool {
	if r == utf8.RuneError && n == 1 {
		return b == 0x85 || b == 0xa0
	}
	return space(r)
}

// trimSpace is s without the white space and controls at its ends (space,
// spaceRune).
func trimSpace(s string) string {
	for s != "" {
		r, n := utf8.DecodeRuneInString(s)
		if !spaceRune(r, n, s[0]) {
			break
		}
		s = s[n:]
	}
	for s != "" {
		r, n := utf8.DecodeLastRuneInString(s)
		if !spaceRune(r, n, s[len(s)-1]) {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}

// trimName is segment s as read by the trailing and spaces readings in m:
// both together trim until neither changes s (a host that trims white
// space in front of one that drops trailing dots reads "admin\t." as
// admin). A segment that trimming makes "." or ".." is a dot segment, and
// loses no more.
func trimName(s string, m int) string {
	for s != "." && s != ".." {
		t := s
		if m&spaces != 0 {
			t = trimSpace(t)
		}
		if m&trailing != 0 && t != "." && t != ".." {
			t = strings.TrimRight(t, ". ")
		}
		if t == s {
			break
		}
		s = t
	}
	return s
}

// Clean cleans one reading of a path, without decoding it, making every
// lenient reading but folding at once: `\` becomes `/`, each segment
// loses a ";params" suffix, trailing dots and spaces, and white space and
// controls at either end, then path.Clean applies. The result starts with
// "/" and has no empty, "." or ".." segment and no trailing slash (except
// "/" itself).
func Clean(p string) string { return clean(p, lenientIn(p)) }

// clean makes the lenient readings in m but folding (which Check applies
// to the result and the rules alike), then path.Clean. m's other readings
// must be ones p allows.
func clean(p string, m int) string {
	if m&^folded == 0 {
		return path.Clean("/" + p)
	}
	if m&backslash != 0 {
		p = strings.ReplaceAll(p, "\\", "/")
	}
	segs := strings.Split(p, "/")
	out := segs[:0]
	for _, s := range segs {
		if i := strings.IndexByte(s, ';'); i >= 0 && m&params != 0 {
			s = s[:i]
		}
		if m&(trailing|spaces) != 0 {
			s = trimName(s, m)
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return path.Clean("/" + strings.Join(out, "/"))
}

// pathEnd returns the index of the first NUL, '?' or '#' in p, where a
// host may take a decoded path to end, or -1.
func pathEnd(p string) int {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == 0 || c == '?' || c == '#' {
			return i
		}
	}
	return -1
}

// unescape decodes every valid %XX in s once and leaves anything else as
// it is: a host that decodes leniently reads the same bytes.
func unescape(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// token reports whether s is an RFC 9110 token.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// keepDotDot is p as a host that does not remove dot segments routes it:
// empty and "." segments dropped, ".." kept, no trailing slash.
func keepDotDot(p string) string {
	segs := strings.Split(p, "/")
	out := segs[:0]
	for _, s := range segs {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}
