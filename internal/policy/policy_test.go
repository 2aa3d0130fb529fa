package policy

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestClean(t *testing.T) {
	cases := map[string]string{
		"":                "/",
		"/":               "/",
		"/admin":          "/admin",
		"/admin/":         "/admin",
		"//admin":         "/admin",
		"/a/../admin":     "/admin",
		"/../../admin":    "/admin",
		`\admin`:          "/admin",
		`/a\..\admin`:     "/admin",
		"/admin;jsession": "/admin",
		"/a/..;/admin":    "/admin",
		"/admin.":         "/admin",
		"/admin. . ":      "/admin",
		"/a/.../admin":    "/a/admin",
		"/app.js":         "/app.js",
		"/x/%2e%2e/admin": "/x/%2e%2e/admin", // Clean does not decode; Check does
		"admin":           "/admin",
		"/a//b///c/":      "/a/b/c",
		// A host that trims a segment's white space and controls at
		// either end (Java's String.trim, Spring's trimTokens, .NET's
		// Trim, Python's strip, JS's trim) reads these as /admin.
		"/admin\t":               "/admin",
		"/\tadmin":               "/admin",
		"/admin\r\n/x":           "/admin/x",
		"/admin\x0b\x0c\x1f\x7f": "/admin",
		"/\x00admin":             "/admin",
		"/admin\u00a0":           "/admin",
		"/admin\xa0":             "/admin", // NBSP to a host that reads Latin-1
		"/admin\x85":             "/admin", // NEL so read
		"/admin\u0085":           "/admin",
		"/\u3000admin\u2028":     "/admin",
		"/admin\ufeff\u200b":     "/admin",
		"/admin\t.":              "/admin",
		"/admin.\t":              "/admin",
		"/x/..\t/admin":          "/admin",
		"/x/.. /admin":           "/admin",
		"/a\tb":                  "/a\tb",
		"/voil\u00e0":            "/voil\u00e0", // ends in the bytes C3 A0: à, no NBSP
		"/\u00e0x":               "/\u00e0x",
	}
	for in, want := range cases {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Clean("/a/./admin/."); got != "/a/admin" {
		t.Errorf("Clean(/a/./admin/.) = %q", got)
	}
}

func TestCheck(t *testing.T) {
	rules := []Rule{
		{Action: Allow, Path: "/admin/health"},
		{Action: Deny, Path: "/admin/*"},
		{Action: Deny, Methods: []string{"POST", "delete"}, Path: "/items/*"},
		{Action: Deny, Methods: []string{"GET"}, Path: "/secret"},
	}
	cases := []struct {
		method, path string
		allowed      bool
	}{
		{"GET", "/", true},
		{"GET", "/admin", false},
		{"GET", "/admin/", false},
		{"GET", "/admin/users", false},
		{"GET", "/admin/health", true},
		{"GET", "/administrator", true},
		{"GET", "//admin", false},
		{"GET", "/a/../admin", false},
		{"GET", "/%2e%2e/admin", false},
		{"GET", "/x/%2E%2E/admin/x", false},
		{"GET", "/x/%252e%252e/admin", false},
		{"GET", "/%61dmin", false},
		{"GET", "/%2561dmin", false},
		{"GET", "/admin%2fusers", false},
		{"GET", "/public%2f..%2fadmin", false},
		{"GET", "/admin;x=1", false},
		{"GET", "/admin.", false},
		{"GET", `/x\..\admin`, false},
		{"GET", "/x/%5c..%5cadmin", false},
		{"GET", "/admin/health/", true},
		{"GET", "/admin/health/../users", false},
		// A host that does not remove dot segments (a prefix router)
		// serves these from /admin/.
		{"GET", "/admin/../x", false},
		{"GET", "/admin/users/../../x", false},
		{"GET", "/admin/./../x", false},
		{"GET", "//admin//../x", false},
		{"GET", `/admin\..\x`, false},
		{"GET", "/ADMIN/../x", false},
		{"GET", "/admin/%2e%2e/x", false},
		{"GET", "/x/../y", true},
		{"GET", "/public/../index", true},
		{"GET", "/items/1", true},
		{"POST", "/items/1", false},
		{"post", "/items/1", false},
		{"Delete", "/items", false},
		{"PUT", "/items/1", true},
		{"GET", "/secret", false},
		{"HEAD", "/secret", false},
		{"POST", "/secret", true},
		{"GET", "/secret/x", true},
		{"GET", "/%zz/admin", true},
		{"GET", "/%zz/../admin", false},
		{"GET", "/%zz", true},
		// Found by FuzzNoBypass: to a host for which `\` is an ordinary
		// byte, ".." removes the whole "x\y" and leaves /admin.
		{"GET", `/admin/x\y/..`, false},
		{"GET", "admin/healt\xae\xb5\xf6\"\xc3n\\\xafh/..", false},
		// Trimming makes "..." empty; a host that does not trim reads /admin.
		{"GET", "/admin/.../..", false},
		{"GET", `/admin\...\..`, false},
		{"GET", "/admin/x;/..", false},
		{"GET", "/admin/;x/..", false},
		// Only the trimming reading is /admin/health; to the others it is
		// under /admin/*.
		{"GET", "/admin/health.", false},
		{"GET", "/app.js", true},
		// A host that reads the path as a C string stops at a NUL.
		{"GET", "/admin%00/x", false},
		{"GET", "/admin%2500.png", false},
		{"GET", "/secret%00.html", false},
		{"GET", "/public%00/admin", true},
		{"GET", "/admin/health%00", false}, // to a host that reads the NUL, under /admin/*
		// A host that decodes the path before it cuts the query or the
		// fragment off stops at a decoded '?' or '#' (a PHP router's
		// parse_url(urldecode($uri)): /secret%3F.php is /secret).
		{"GET", "/secret%3F.php", false},
		{"GET", "/secret%3f", false},
		{"GET", "/secret%23x", false},
		{"GET", "/admin%253Fx", false},
		{"GET", "/public%3F/admin", true},
		{"GET", "/public%23/admin", true},
		// A host that compares paths without case serves these as /admin.
		{"GET", "/ADMIN", false},
		{"GET", "/Admin/users", false},
		{"GET", "/%41dmin", false},
		{"GET", "/%2541DMIN", false},
		// Outside /admin/* with case, the allowed /admin/health without
		// it, but under /admin/ to a case-free host that keeps "..".
		{"GET", "/ADMIN/x/../HEALTH", false},
		{"GET", "/ADMIN/x/../USERS", false},
		{"GET", "/ITEMS/1", true},
		{"POST", "/ITEMS/1", false},
		{"GET", "/SECRET", false},
		{"GET", "/Public", true},
		// A host that compares without case by upper-casing (ASP.NET
		// Core's routing and IIS, OrdinalIgnoreCase; Java's
		// equalsIgnoreCase) reads dotless ı as i and long ſ as s.
		{"GET", "/adm%C4%B1n", false},
		{"GET", "/ADM%C4%B1N/users", false},
		{"GET", "/%C5%BFecret", false},
		{"GET", "/adm%C4%B1nistrator", true},
		// A host that trims a segment's white space and control
		// characters at either end serves these as /admin: Java's
		// String.trim drops every char up to U+0020 (Spring's
		// trimTokens, CVE-2016-5007), .NET's Trim, JS's trim and
		// Python's strip drop Unicode spaces too, and a host that reads
		// the path as Latin-1 reads %a0 as NBSP.
		{"GET", "/admin%20", false},
		{"GET", "/admin%09", false},
		{"GET", "/admin%0d", false},
		{"GET", "/admin%0a", false},
		{"GET", "/admin%0b", false},
		{"GET", "/admin%0c", false},
		{"GET", "/admin%1f", false},
		{"GET", "/admin%1c", false},
		{"GET", "/admin%7f", false},
		{"GET", "/admin%09/x", false},
		{"GET", "/%09admin", false},
		{"GET", "/%20admin", false},
		{"GET", "/%0d%0aadmin/x", false},
		{"GET", "/admin%a0", false},
		{"GET", "/admin%85", false},
		{"GET", "/admin%C2%A0", false},
		{"GET", "/admin%C2%85", false},
		{"GET", "/admin%E3%80%80", false},
		{"GET", "/admin%E2%80%A8", false},
		{"GET", "/admin%E1%9A%80", false},
		{"GET", "/admin%EF%BB%BF", false},
		{"GET", "/%E2%80%8Badmin", false},
		{"GET", "/admin%2509", false},
		{"GET", "/admin%09.", false},
		{"GET", "/ADMIN%09", false},
		{"GET", "/x/..%09/admin", false},
		{"GET", "/x/..%20/admin", false},
		{"GET", "/x/..%20/ADMIN", false},
		{"GET", "/admin%09istrator", true},
		{"GET", "/x%09", true},
		{"GET", "/voil%C3%A0", true},
	}
	for _, c := range cases {
		if got, _ := Check(rules, c.method, c.path); got != c.allowed {
			t.Errorf("%s %s: allowed %v, want %v", c.method, c.path, got, c.allowed)
		}
	}
	if ok, i := Check(nil, "GET", "/admin"); !ok || i != -1 {
		t.Error("no rules must allow")
	}
	// "*" among a rule's methods is every method, as its writer meant: a
	// deny so written matched no request (no request's method is "*")
	// and closed nothing; an allow so written opened nothing.
	star := []Rule{
		{Action: Allow, Methods: []string{"*"}, Path: "/admin/open"},
		{Action: Deny, Methods: []string{"*"}, Path: "/admin/*"},
		{Action: Deny, Methods: []string{"get", "*"}, Path: "/both"},
	}
	for _, c := range []struct {
		method, path string
		allowed      bool
	}{
		{"GET", "/admin/x", false}, {"HEAD", "/admin/x", false}, {"DELETE", "/admin", false},
		{"PROPFIND", "/admin/x", false}, {"GET", "/admin/open", true}, {"POST", "/admin/open", true},
		{"PATCH", "/both", false}, {"GET", "/other", true},
	} {
		if got, _ := Check(star, c.method, c.path); got != c.allowed {
			t.Errorf("methods [\"*\"]: %s %s: allowed %v, want %v", c.method, c.path, got, c.allowed)
		}
	}
	if ok, i := Check([]Rule{{Action: Deny, Path: "/*"}}, "GET", "/anything"); ok || i != 0 {
		t.Error("/* must cover everything")
	}
	// A rule written with capitals covers every case of its path too.
	upper := []Rule{{Action: Deny, Path: "/Wp-Admin/*"}, {Action: Deny, Path: "/\u212Aey"}} // Kelvin sign K
	for _, p := range []string{"/Wp-Admin", "/wp-admin/x", "/WP-ADMIN", "/key", "/KEY"} {
		if ok, _ := Check(upper, "GET", p); ok {
			t.Errorf("%s allowed past %+v", p, upper)
		}
	}
	if ok, _ := Check(upper, "GET", "/wp-admins"); !ok {
		t.Error("/wp-admins denied by /Wp-Admin/*")
	}
}

// TestCheckBoundedWork: a path whose decoding brings out a new '#'
// (or '?', NUL) at every round made Check read the part before it anew,
// and that part's next '#' anew again, without bound: the work doubled
// with each layer of encoding, and a 1 KiB request target held a core for
// hours. The rounds of decoding along any such chain are MaxDecode in
// all, as the package doc says, so the path is still read as a host that
// decodes up to MaxDecode times reads it.
func TestCheckBoundedWork(t *testing.T) {
	// nested(k) is "#" percent-encoded k times: %23, %2523, %252523, ...
	nested := func(k int) string { return "%" + strings.Repeat("25", k-1) + "23" }
	p := "/x"
	for k := 30; k >= 1; k-- {
		p += nested(k)
	}
	rules := []Rule{{Action: Deny, Path: "/admin/*"}}
	done := make(chan bool, 1)
	go func() {
		ok, _ := Check(rules, "GET", p)
		done <- ok
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Errorf("%s denied by %+v", p, rules)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Check of a %d-byte path still running after 10 s", len(p))
	}
	// Within MaxDecode rounds a cut still counts: decoded twice this is
	// /admin#x, which a host that decodes the path and then cuts off a
	// fragment serves as /admin.
	if ok, _ := Check(rules, "GET", "/admin"+nested(2)+"x"); ok {
		t.Error("/admin%2523x allowed")
	}
	if ok, _ := Check(rules, "GET", "/adm%2569n"+nested(3)+"x"+nested(1)); ok {
		t.Error("/adm%2569n%252523x%23 allowed")
	}
}

func TestValidate(t *testing.T) {
	good := [][]Rule{
		nil,
		{{Action: Allow, Path: "/"}, {Action: Deny, Path: "/*"}},
		{{Action: Deny, Methods: []string{"GET", "post"}, Path: "/a/b/*"}},
	}
	bad := [][]Rule{
		{{Action: "block", Path: "/a"}},
		{{Action: Deny, Path: "a"}},
		{{Action: Deny, Path: "/a*"}},
		{{Action: Deny, Path: "/a/*/b"}},
		{{Action: Deny, Path: "/a/../b"}},
		{{Action: Deny, Path: "/a/"}},
		{{Action: Deny, Path: "/%61"}},
		{{Action: Deny, Path: "/a", Methods: []string{"G T"}}},
		{{Action: Deny, Path: ""}},
		{{Action: Deny, Path: "/a\x0b"}},
		{{Action: Deny, Path: "/\u00a0a/*"}},
	}
	for _, r := range good {
		if err := Validate(r); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, r := range bad {
		if err := Validate(r); err == nil {
			t.Errorf("%+v validated", r)
		}
	}
}

// TestCheckWorkBudget: a path read along a chain of cuts is read some
// fifteen times over per round of decoding, each reading in up to sixteen
// lenient ways: 8 KiB so built took ten milliseconds of a core, and a
// request's override fields are more paths. The checks of one request
// share a budget (MaxWork, and WorkPerByte per byte of each path), and a
// request over it is denied; an ordinary path, however long, fits.
func TestCheckWorkBudget(t *testing.T) {
	rules := []Rule{{Action: Deny, Path: "/admin/*"}}
	get := []string{"GET"}
	for _, c := range hostilePaths(8 << 10) {
		var w Work
		ok, i := CheckWork(rules, get, c.path, &w)
		// The budget is checked before each pass, and a pass reads at
		// most twice the path.
		if max := MaxWork + WorkPerByte*len(c.path) + 2*len(c.path); w.Used() > max {
			t.Errorf("%s: %d bytes read, over the budget's %d", c.name, w.Used(), max)
		}
		if c.name == "cutsLast" && (ok || i != -1) {
			t.Errorf("%s: Check = %v, %d; want denied over budget", c.name, ok, i)
		}
		if c.name != "cutsLast" && !ok {
			t.Errorf("%s: denied", c.name)
		}
	}
	// Every lenient reading, dot segments and two rounds of decoding in
	// 8 KiB: allowed, and the budget shared with a second path of the
	// same request holds both.
	long := strings.Repeat(`/A;b.\x%2520/../`, 512)
	var w Work
	for range 2 {
		if ok, _ := CheckWork(rules, get, long, &w); !ok {
			t.Fatalf("%.40s... (%d bytes) denied after %d bytes read", long, len(long), w.Used())
		}
	}
	// The budget is the request's: many paths in one Work run it out.
	var cuts string
	for _, c := range hostilePaths(1 << 10) {
		if c.name == "cutsLast" {
			cuts = c.path
		}
	}
	for n := 0; ; n++ {
		if ok, _ := CheckWork(rules, get, cuts, &w); !ok {
			break
		}
		if n > 100 {
			t.Fatal("a request's checks are never denied whatever their work")
		}
	}
	// A deny still denies, with its rule, within the budget.
	if ok, i := CheckWork(rules, get, "/admin", new(Work)); ok || i != 0 {
		t.Errorf("/admin: %v, %d", ok, i)
	}
}

// TestCheckWorkMethods: the readings of a path are made once for all the
// methods a request names (its own and its overrides'), each decided
// for every method: a check per method read the path anew as many times,
// and spent a request's budget as many times.
func TestCheckWorkMethods(t *testing.T) {
	rules := []Rule{
		{Action: Deny, Path: "/admin/*"},
		{Action: Deny, Methods: []string{"DELETE"}, Path: "/items/*"},
		{Action: Deny, Methods: []string{"PUT", "PATCH"}, Path: "/items/*"},
	}
	long := strings.Repeat(`/A;b.\x%2520/../`, 128)
	var one, all Work
	if ok, _ := CheckWork(rules, []string{"GET"}, long, &one); !ok {
		t.Fatal("GET denied")
	}
	if ok, _ := CheckWork(rules, []string{"GET", "POST", "PUT", "PATCH", "DELETE"}, long, &all); !ok {
		t.Fatal("denied for some method")
	}
	// Deciding each reading for five methods costs more; reading the
	// path five times would cost five times as much.
	if all.Used() >= 2*one.Used() {
		t.Errorf("five methods read %d bytes, one %d: the path was read again per method", all.Used(), one.Used())
	}
	for _, c := range []struct {
		methods []string
		path    string
		rule    int
	}{
		{[]string{"GET", "DELETE"}, "/items/1" + long, 1},
		{[]string{"POST", "PATCH", "GET"}, "/items/%31", 2},
		{[]string{"GET", "HEAD"}, "/ADMIN", 0},
		{[]string{"GET", "POST"}, "/items/1", -1},
	} {
		ok, i := CheckWork(rules, c.methods, c.path, new(Work))
		if i != c.rule || ok != (c.rule == -1) {
			t.Errorf("%v %.20s: %v, %d; want rule %d", c.methods, c.path, ok, i, c.rule)
		}
	}
}

// TestCheckWorkDecisions: deciding a reading reads every rule for every
// method, and the byte budget did not count it: to an app of a hundred
// rules naming ten methods each, a 30-byte path read in every way for
// five methods was 10 ms of a core, having read 7 KB of a megabyte. Each
// decision is spent too (a byte per rule and per method of a rule, per
// method decided); the same path with the app's usual few rules, or an
// ordinary path with these, is allowed.
func TestCheckWorkDecisions(t *testing.T) {
	var many []Rule
	for i := range 100 {
		var ms []string
		for j := range 10 {
			ms = append(ms, "M"+strconv.Itoa(i*10+j))
		}
		many = append(many, Rule{Action: Deny, Methods: ms, Path: "/x" + strconv.Itoa(i) + "/*"})
	}
	few := []Rule{{Action: Deny, Path: "/admin/*"}}
	cuts := `/A;b.\.` + "%25252523%252523%2523%23"
	methods := []string{"GET", "M1", "M2", "M3", "M4"}
	var w Work
	if ok, i := CheckWork(many, methods, cuts, &w); ok || i != -1 {
		t.Errorf("%s with %d rules, %d methods: %v, %d after %d bytes; want denied over budget", cuts, len(many), len(methods), ok, i, w.Used())
	}
	if max := MaxWork + WorkPerByte*len(cuts) + len(methods)*1100; w.Used() > max {
		t.Errorf("%d bytes read, over the budget's %d", w.Used(), max)
	}
	if ok, _ := CheckWork(few, methods, cuts, new(Work)); !ok {
		t.Errorf("%s with one rule: denied", cuts)
	}
	long := "/Static/" + strings.Repeat(`a;v=1\app.js./`, 100)
	if ok, _ := CheckWork(many, []string{"GET", "M1"}, long, new(Work)); !ok {
		t.Errorf("%.30s... with %d rules: denied", long, len(many))
	}
}

// TestCheckLenientNeverAdmits: a lenient reading can add a denial, never
// lift one. A path whose trimmed reading an allow rule admits, but whose
// reading as sent falls under a deny, is denied: a host that does not
// trim serves it from the denied path. And one whose trimmed reading
// leaves the allow (a "..%09" that is ".." to a host that trims) is
// denied too. The raw forms are what an override path (X-Original-URL)
// may hold: a field value may carry a tab or UTF-8 inside it.
func TestCheckLenientNeverAdmits(t *testing.T) {
	for _, c := range []struct {
		rules []Rule
		path  string
	}{
		{[]Rule{{Action: Allow, Path: "/admin/health"}, {Action: Deny, Path: "/admin/*"}}, "/admin/health\t"},
		{[]Rule{{Action: Allow, Path: "/admin/health"}, {Action: Deny, Path: "/admin/*"}}, "/admin/health\u00a0"},
		{[]Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}, "/public\t/x"},
		{[]Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}, "/\u3000public/x"},
		{[]Rule{{Action: Allow, Path: "/admin/health"}, {Action: Deny, Path: "/admin/*"}}, "/admin/health%09"},
		{[]Rule{{Action: Allow, Path: "/admin/health"}, {Action: Deny, Path: "/admin/*"}}, "/admin/%09health"},
		{[]Rule{{Action: Allow, Path: "/admin/health"}, {Action: Deny, Path: "/admin/*"}}, "/admin/health%C2%A0"},
		{[]Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}, "/public%09/x"},
		{[]Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}, "/%09public/x"},
		{[]Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}, "/public%a0"},
		{[]Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}, "/public/x/..%09/../y"},
	} {
		if ok, _ := Check(c.rules, "GET", c.path); ok {
			t.Errorf("rules %+v: %q allowed, though some host reads it outside the allow", c.rules, c.path)
		}
	}
	// Where every reading is allowed, the request is.
	pub := []Rule{{Action: Allow, Path: "/public/*"}, {Action: Deny, Path: "/*"}}
	for _, p := range []string{"/public/x%09", "/public/%09x", "/public/a%C2%A0b", "/public/x\t"} {
		if ok, _ := Check(pub, "GET", p); !ok {
			t.Errorf("rules %+v: %q denied", pub, p)
		}
	}
}

// TestValidateStored: a rule path with white space or a control at a
// segment's end is refused on write (Validate), since a host that trims
// them reads it otherwise; but one stored before that was refused is
// still applied (ValidateStored), and matched as written by every
// reading that keeps them, or an upgrade would drop its app from routing.
func TestValidateStored(t *testing.T) {
	spaced := []Rule{
		{Action: Deny, Path: "/admin\x0b/*"},
		{Action: Allow, Path: "/\u00a0pub"},
		{Action: Deny, Path: "/x\u3000"},
		{Action: Deny, Path: "/a\x7f/b"},
	}
	for _, r := range spaced {
		if Validate([]Rule{r}) == nil {
			t.Errorf("Validate(%+v) = nil", r)
		}
		if err := ValidateStored([]Rule{r}); err != nil {
			t.Errorf("ValidateStored(%+v): %v", r, err)
		}
	}
	// What Validate refuses for any other reason, ValidateStored does too.
	for _, r := range []Rule{
		{Action: Deny, Path: "/a/"}, {Action: Deny, Path: "/a."}, {Action: Deny, Path: "/a\x0b."},
		{Action: Deny, Path: "/%61"}, {Action: "block", Path: "/a"},
		{Action: Deny, Path: "/a\t"}, {Action: Deny, Path: "/a/../b"},
	} {
		if ValidateStored([]Rule{r}) == nil {
			t.Errorf("ValidateStored(%+v) = nil", r)
		}
	}
	// Each is matched as written, by the readings that keep its white
	// space (an allow of such a path, as of any that a request must
	// escape, admits nothing a deny after it covers: the path as sent
	// is escaped).
	rules := spaced
	for _, c := range []struct {
		path    string
		allowed bool
	}{
		{"/admin%0b/x", false},
		{"/admin%0B", false},
		{"/x%E3%80%80", false},
		{"/a%7f/b", false},
		{"/%C2%A0pub", true},
		{"/pub", true},
		{"/admin", true},
	} {
		if ok, _ := Check(rules, "GET", c.path); ok != c.allowed {
			t.Errorf("%s: allowed %v, want %v", c.path, ok, c.allowed)
		}
	}
}
