package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/api"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
)

const ctlToken = "ctl-test-token"

// startAPI serves the real control API over a real store on an embedded
// NATS and returns its base URL.
func startAPI(t *testing.T) string {
	t.Helper()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Options{Store: st, NotFound: store.ErrNotFound, ControlToken: ctlToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestCtlAgainstAPI(t *testing.T) {
	url := startAPI(t)
	ctl := func(args ...string) (string, error) {
		out, _, err := runCmd(t, append([]string{"ctl", "-api", url, "-token", ctlToken}, args...)...)
		return out, err
	}
	must := func(args ...string) map[string]any {
		t.Helper()
		out, err := ctl(args...)
		if err != nil {
			t.Fatalf("ctl %q: %v", args, err)
		}
		var v map[string]any
		if out != "" {
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("ctl %q printed non-JSON %q", args, out)
			}
		}
		return v
	}
	app := must("apps", "put", "shop", `{"cors":{"origins":["https://shop.example"]}}`)
	if app["id"] != "shop" || app["mode"] != "http" {
		t.Errorf("put app: %v", app)
	}
	if got := must("apps", "get", "shop"); got["status"] != "active" {
		t.Errorf("get app: %v", got)
	}
	if l := must("apps", "list"); len(l["apps"].([]any)) != 1 {
		t.Errorf("list apps: %v", l)
	}
	body := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(body, []byte(`{"public_key":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=","apps":["shop"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// -f after the positional words works too
	if k := must("keys", "put", "web-1", "-f", body); k["host_id"] != "web-1" {
		t.Errorf("put key: %v", k)
	}
	if k := must("keys", "get", "web-1"); k["public_key"] == "" {
		t.Errorf("get key: %v", k)
	}
	d := must("domains", "put", "shop.example.org", `{"app":"shop"}`)
	if d["verified"] != false || d["token"] == "" {
		t.Errorf("put domain: %v", d)
	}
	if d := must("domains", "verify", "shop.example.org", `{"method":"manual"}`); d["verified"] != true {
		t.Errorf("verify: %v", d)
	}
	must("zones", "put", "apps.example.com", `{"gateways":["127.0.0.1"]}`)
	must("records", "put", "apps.example.com", "www", "A", `{"values":["192.0.2.1"]}`)
	if r := must("records", "list", "apps.example.com"); len(r["records"].([]any)) != 1 {
		t.Errorf("records: %v", r)
	}
	if r := must("records", "get", "apps.example.com", "www", "a"); r["name"] != "www.apps.example.com" {
		t.Errorf("record: %v", r)
	}
	must("records", "delete", "apps.example.com", "www", "A")
	if h := must("hosts", "list"); len(h["hosts"].([]any)) != 0 {
		t.Errorf("hosts: %v", h)
	}
	// an app still named by a mapping or a host key stays, and the
	// refusal says what to delete first
	if _, err := ctl("apps", "delete", "shop"); err == nil || !strings.Contains(err.Error(), "409 Conflict") ||
		!strings.Contains(err.Error(), "domain shop.example.org") || !strings.Contains(err.Error(), "host key web-1") {
		t.Errorf("delete of a still-named app: %v, want 409 naming its domain and key", err)
	}
	must("domains", "delete", "shop.example.org")
	must("keys", "delete", "web-1")
	must("apps", "delete", "shop")

	// failures: the problem detail, one line, exit 1
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"apps", "get", "shop"}, `ctl: GET /api/v3/apps/shop: 404 Not Found: app "shop" not found`},
		{[]string{"apps", "put", "shop", `{"mode":"tcp"}`}, `400 Bad Request: mode: must be http or passthrough, got "tcp"`},
		{[]string{"apps", "put", "API"}, `400 Bad Request: app id must be one DNS label`},
	} {
		_, err := ctl(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ctl %q: %v, want %q", c.args, err, c.want)
		}
	}
	_, _, err := runCmd(t, "ctl", "-api", url, "-token", "wrong", "apps", "list")
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") || strings.Contains(err.Error(), "no token") {
		t.Errorf("wrong token: %v", err)
	}
	// No token at all: the refusal says where one goes.
	t.Setenv("GATEHOUSE_CONTROL_TOKEN", "")
	_, _, err = runCmd(t, "ctl", "-api", url, "apps", "list")
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "give -token, or set GATEHOUSE_CONTROL_TOKEN") {
		t.Errorf("no token: %v", err)
	}
}

// TestCtlGetPutsBack: what ctl get prints, ctl put -f takes back as it
// is, for every kind of item: a domain mapping's printed domain, token and
// verified were refused as unknown fields.
func TestCtlGetPutsBack(t *testing.T) {
	t.Parallel()
	url := startAPI(t)
	ctl := func(args ...string) string {
		t.Helper()
		out, _, err := runCmd(t, append([]string{"ctl", "-api", url, "-token", ctlToken}, args...)...)
		if err != nil {
			t.Fatalf("ctl %q: %v", args, err)
		}
		return out
	}
	ctl("apps", "put", "shop", `{"cors":{"origins":["https://shop.example"]},"policy":[{"action":"deny","path":"/admin/*"}]}`)
	ctl("domains", "put", "shop.example.org", `{"app":"shop"}`)
	ctl("domains", "put", "www.shop.example.org", `{"app":"shop"}`)
	ctl("domains", "verify", "www.shop.example.org", `{"method":"manual"}`)
	ctl("keys", "put", "web-1", `{"public_key":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=","apps":["shop"]}`)
	ctl("zones", "put", "apps.example.com", `{"gateways":["127.0.0.1"]}`)
	ctl("records", "put", "apps.example.com", "www", "A", `{"values":["192.0.2.1"]}`)
	dir := t.TempDir()
	for i, item := range [][]string{
		{"apps", "shop"},
		{"domains", "shop.example.org"},
		{"domains", "www.shop.example.org"},
		{"keys", "web-1"},
		{"zones", "apps.example.com"},
		{"records", "apps.example.com", "www", "A"},
	} {
		got := ctl(append([]string{item[0], "get"}, item[1:]...)...)
		f := filepath.Join(dir, strconv.Itoa(i)+".json")
		if err := os.WriteFile(f, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		if back := ctl(append(append([]string{item[0], "put"}, item[1:]...), "-f", f)...); back != got {
			t.Errorf("ctl %s put -f of what get printed:\n%s\nwant it as it was:\n%s", item[0], back, got)
		}
	}
}

// TestCtlNeverPrintsToken: the token from GATEHOUSE_CONTROL_TOKEN is a
// secret, so neither help nor an error shows it.
func TestCtlNeverPrintsToken(t *testing.T) {
	const secret = "s3cret-platform-token"
	t.Setenv("GATEHOUSE_CONTROL_TOKEN", secret)
	url := startAPI(t)
	for _, args := range [][]string{
		{"ctl", "-h"},
		{"ctl", "-bogus"},
		{"ctl", "apps"},
		{"ctl", "-api", url, "apps", "list"}, // 401: the env token is the wrong one
	} {
		out, errb, err := runCmd(t, args...)
		var msg string
		if err != nil {
			msg = err.Error()
		}
		if strings.Contains(out+errb+msg, secret) {
			t.Errorf("ctl %q printed the token:\nstdout %q\nstderr %q\nerr %q", args, out, errb, msg)
		}
	}
	// the variable still supplies the token
	t.Setenv("GATEHOUSE_CONTROL_TOKEN", ctlToken)
	if _, _, err := runCmd(t, "ctl", "-api", url, "apps", "list"); err != nil {
		t.Errorf("token from GATEHOUSE_CONTROL_TOKEN: %v", err)
	}
}

// TestCtlNeverPrintsAPIPassword: an API URL may carry a password (a
// management listener behind an authenticating proxy); like the token,
// neither help (GATEHOUSE_API as the default) nor an error shows it, and
// the variable still gives the URL.
func TestCtlNeverPrintsAPIPassword(t *testing.T) {
	const secret = "s3cret-proxy-password"
	t.Setenv("GATEHOUSE_API", "http://ops:"+secret+"@127.0.0.1:1")
	for _, args := range [][]string{
		{"ctl", "-h"},
		{"ctl", "-bogus"},
		{"ctl", "apps", "list"}, // the variable's URL: connection refused
		{"ctl", "-api", "ftp://ops:" + secret + "@x", "apps", "list"},
		{"ctl", "-api", "http://ops:" + secret + "@[::1", "apps", "list"},
	} {
		out, errb, err := runCmd(t, args...)
		var msg string
		if err != nil {
			msg = err.Error()
		}
		if strings.Contains(out+errb+msg, secret) {
			t.Errorf("ctl %q printed the password:\nstdout %q\nstderr %q\nerr %q", args, out, errb, msg)
		}
	}
	if _, _, err := runCmd(t, "ctl", "apps", "list"); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("GATEHOUSE_API not used: %v", err)
	}
}

// ctl prints an item's ETag on stderr and sends it back with -if-match
// (quotes optional): a write made on a stale tag fails with the API's
// 412, and changes nothing.
func TestCtlConditionalWrite(t *testing.T) {
	url := startAPI(t)
	ctl := func(args ...string) (string, string, error) {
		return runCmd(t, append([]string{"ctl", "-api", url, "-token", ctlToken}, args...)...)
	}
	tagIn := func(stderr string) string {
		t.Helper()
		_, tag, ok := strings.Cut(strings.TrimSpace(stderr), "ETag: ")
		if !ok || len(tag) != 34 {
			t.Fatalf("no ETag on stderr: %q", stderr)
		}
		return tag
	}
	_, errb, err := ctl("apps", "put", "shop", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	read := tagIn(errb)
	if _, _, err := ctl("apps", "put", "shop", `{"status":"suspended"}`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-if-match", read, "apps", "put", "shop", `{"status":"retired"}`},
		{"-if-match", strings.Trim(read, `"`), "apps", "delete", "shop"},
		{"apps", "put", "shop", `{}`, "-if-none-match", "*"},
	} {
		if _, _, err := ctl(args...); err == nil || !strings.Contains(err.Error(), "412 Precondition Failed") {
			t.Errorf("ctl %q: %v, want the API's 412", args, err)
		}
	}
	out, errb, err := ctl("apps", "get", "shop")
	if err != nil || !strings.Contains(out, `"suspended"`) {
		t.Fatalf("after the refused writes: %s, %v", out, err)
	}
	cur := tagIn(errb)
	if _, errb, err := ctl("apps", "get", "shop", "-if-none-match", cur); err != nil || !strings.Contains(errb, "304 Not Modified") {
		t.Errorf("get -if-none-match: %q, %v", errb, err)
	}
	if _, _, err := ctl("-if-match", strings.Trim(cur, `"`), "apps", "put", "shop", `{"status":"retired"}`); err != nil {
		t.Errorf("put -if-match with the current tag: %v", err)
	}
}

// A condition on a list is refused before anything is sent (a list has no
// ETag), and an answer's Retry-After is shown with its problem.
func TestCtlConditionOnListAndRetryAfter(t *testing.T) {
	for _, args := range [][]string{
		{"-if-match", "x", "apps", "list"},
		{"hosts", "list", "-if-none-match", "*"},
		{"-if-match", "x", "records", "list", "apps.example.com"},
	} {
		_, _, err := runCmd(t, append([]string{"ctl", "-api", "http://127.0.0.1:1", "-token", ctlToken}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "a list has no ETag") {
			t.Errorf("ctl %q: %v", args, err)
		}
	}
	for sent, said := range map[string]string{
		"5": "retry later (Retry-After: 5 s)",
		// a date (a proxy in front may send one) or anything else is no
		// number of seconds
		"Wed, 21 Oct 2015 07:28:00 GMT": "retry later (Retry-After: Wed, 21 Oct 2015 07:28:00 GMT)",
		"soon":                          `retry later (Retry-After: "soon")`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", sent)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"title":"Too Many Requests","detail":"too many wrong tokens from this address; retry later"}`))
		}))
		_, _, err := runCmd(t, "ctl", "-api", srv.URL, "-token", ctlToken, "apps", "list")
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), said) {
			t.Errorf("429 with Retry-After %q: %v, want it to say %s", sent, err, said)
		}
	}
	_, _, err := runCmd(t, "ctl", "-ifmatch", "x")
	if err == nil || strings.Contains(err.Error(), "gatehouse ctl") || !strings.Contains(err.Error(), "ctl: flag provided but not defined") {
		t.Errorf("a bad flag: %v", err)
	}
}

// An answer whose body is not JSON is not the control API's (every
// control route answers JSON, its errors problem+json): an -api that
// reaches the dashboard's page or some other server fails, exit 1,
// printing nothing to stdout, with one line that says -api may be wrong.
// A 2xx used to print the HTML and exit 0; a 4xx or 5xx printed the whole
// page (up to 64 MiB) on stderr as its "detail". A plain-text answer (Go's
// own 431 or 400 before any handler runs, a proxy's 502) is quoted, its
// first line and at most 200 bytes of it.
func TestCtlRefusesAnswerNotJSON(t *testing.T) {
	page := "<!doctype html>\n<title>gatehouse</title>\n" + strings.Repeat("<p>filler</p>\n", 1000)
	for _, tc := range []struct {
		status      int
		contentType string
		body        string
		want        string
	}{
		{200, "text/html; charset=utf-8", page,
			`ctl: GET /api/v3/apps: 200 OK but the answer is not JSON (Content-Type "text/html; charset=utf-8"): is -api the control API's base URL?`},
		{404, "text/html; charset=utf-8", page,
			`ctl: GET /api/v3/apps: 404 Not Found but the answer is not JSON (Content-Type "text/html; charset=utf-8"): is -api the control API's base URL?`},
		{502, "text/plain; charset=utf-8", "upstream connect error\nreset reason: connection failure\n",
			`ctl: GET /api/v3/apps: 502 Bad Gateway: "upstream connect error"`},
		{431, "text/plain; charset=utf-8", strings.Repeat("x", 300) + "\n",
			`ctl: GET /api/v3/apps: 431 Request Header Fields Too Large: "` + strings.Repeat("x", 200) + `…"`},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		out, _, err := runCmd(t, "ctl", "-api", srv.URL, "-token", ctlToken, "apps", "list")
		srv.Close()
		if err == nil || exitCode(err, io.Discard) != 1 {
			t.Errorf("ctl against a %d %s: err %v, want exit 1", tc.status, tc.contentType, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%d %s: error %.300q\nwant  %q", tc.status, tc.contentType, err, tc.want)
		}
		if out != "" {
			t.Errorf("%d %s: printed %q", tc.status, tc.contentType, out)
		}
	}
}

// ctl lists in pages with -limit and -after, following the API's
// "next"; both are refused where the API does not page, before anything
// is sent.
func TestCtlListsInPages(t *testing.T) {
	url := startAPI(t)
	ctl := func(args ...string) (string, error) {
		out, _, err := runCmd(t, append([]string{"ctl", "-api", url, "-token", ctlToken}, args...)...)
		return out, err
	}
	want := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, id := range want {
		if _, err := ctl("apps", "put", id); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for range len(want) + 1 {
		args := []string{"-limit", "2", "apps", "list"}
		if after != "" {
			args = append(args, "-after", after)
		}
		out, err := ctl(args...)
		if err != nil {
			t.Fatalf("ctl %q: %v", args, err)
		}
		var page struct {
			Apps []struct{ ID string }
			Next *string
		}
		if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Apps) > 2 {
			t.Fatalf("ctl %q printed %q", args, out)
		}
		for _, a := range page.Apps {
			got = append(got, a.ID)
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("paged: %v, want %v", got, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-limit", "2", "apps", "get", "a1"}, "-limit and -after are for list"},
		{[]string{"-after", "x", "clusters", "list"}, "-limit and -after are for list"},
		{[]string{"-limit", "1001", "apps", "list"}, "-limit must be 1 to 1000"},
		{[]string{"-limit", "-1", "domains", "list"}, "-limit must be 1 to 1000"},
	} {
		_, _, err := runCmd(t, append([]string{"ctl", "-api", "http://127.0.0.1:1", "-token", ctlToken}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ctl %q: %v, want %q", c.args, err, c.want)
		}
	}
}

// An answer past what ctl holds (a whole list of a large platform) says
// so and how to page, where it used to be cut short and called "not
// JSON", blaming -api.
func TestCtlAnswerTooLarge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		item := []byte(`{"id":"app-0000000000","mode":"http","status":"active"},`)
		_, _ = w.Write([]byte(`{"apps":[`))
		for n := 0; n <= 64<<20; n += len(item) {
			if _, err := w.Write(item); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`{"id":"last"}]}`))
	}))
	defer srv.Close()
	// Reading 64 MiB costs some 7 s of CPU under -race; with every
	// package's tests alongside on two cores that took past the default
	// -timeout (30 s), and the answer's size was never reached.
	out, _, err := runCmd(t, "ctl", "-api", srv.URL, "-token", ctlToken, "-timeout", "5m", "apps", "list")
	if err == nil || !strings.Contains(err.Error(), "larger than 64 MiB; list in pages with -limit and -after") {
		t.Errorf("ctl with a 64 MiB answer: %v", err)
	}
	if out != "" {
		t.Errorf("printed %d bytes", len(out))
	}
}

// TestCtlNameIsOneItem: a name is one path segment of the item it names,
// whatever it holds. "." and ".." are path steps rather than segments, so
// a DELETE of the record "." ".." went to the zone itself (the API's
// router cleans the path and redirects, and ctl followed): it is refused
// before anything is sent, and the zone and its record stay.
// (records/./.. is the zone's own path once cleaned.)
func TestCtlNameIsOneItem(t *testing.T) {
	url := startAPI(t)
	ctl := func(args ...string) (string, error) {
		out, _, err := runCmd(t, append([]string{"ctl", "-api", url, "-token", ctlToken}, args...)...)
		return out, err
	}
	if _, err := ctl("zones", "put", "apps.example.com", `{"gateways":["127.0.0.1"]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl("records", "put", "apps.example.com", "www", "A", `{"values":["192.0.2.1"]}`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"records", "delete", "apps.example.com", ".", ".."},
		{"records", "get", "apps.example.com", "..", ".."},
		{"zones", "delete", "."},
		{"apps", "put", "..", `{}`},
	} {
		if _, err := ctl(args...); err == nil || !strings.Contains(err.Error(), "cannot be") {
			t.Errorf("ctl %q: %v, want a refusal of the name", args, err)
		}
	}
	if out, err := ctl("records", "get", "apps.example.com", "www", "A"); err != nil || !strings.Contains(out, "192.0.2.1") {
		t.Errorf("the zone's record after the refused deletes: %q, %v", out, err)
	}
}

// TestCtlRedirectIsNotFollowed: the control API answers no redirect of
// its own. Followed, a 301 or 302 turns a put into a GET of the same URL
// (net/http's client, as browsers do), which answered the item unchanged,
// exit 0, as if the put had gone through; and a 307 or 308 sends the
// token on. ctl stops at a redirect, says where it points, and exits 1.
func TestCtlRedirectIsNotFollowed(t *testing.T) {
	var writes, reads int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved/api/v3/apps/shop" {
			if r.Method == http.MethodPut {
				writes++
			} else {
				reads++
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"shop","mode":"http"}`)
			return
		}
		http.Redirect(w, r, "/moved"+r.URL.Path, http.StatusMovedPermanently)
	}))
	t.Cleanup(srv.Close)
	_, _, err := runCmd(t, "ctl", "-api", srv.URL, "-token", ctlToken, "apps", "put", "shop", `{"mode":"passthrough"}`)
	if err == nil || !strings.Contains(err.Error(), "301") || !strings.Contains(err.Error(), "/moved/api/v3/apps/shop") {
		t.Errorf("put answered by a redirect: %v, want exit 1 naming the 301 and where it points", err)
	}
	if writes+reads != 0 {
		t.Errorf("the redirect was followed: %d writes, %d reads", writes, reads)
	}
}

// TestCtlErrorNamesThePathSent: -api with a path of its own (the
// control API's prefix, taken for the base URL) sends every call under
// it. The error named only the route ctl appends, "GET /api/v3/apps:
// 404 Not Found: no such control route", which reads as if the gateway
// had no such route; it names the path that was sent.
func TestCtlErrorNamesThePathSent(t *testing.T) {
	base := startAPI(t)
	_, _, err := runCmd(t, "ctl", "-api", base+"/api/v3", "-token", ctlToken, "apps", "list")
	if err == nil || !strings.Contains(err.Error(), "GET /api/v3/api/v3/apps: 404") {
		t.Errorf("ctl -api %s/api/v3 apps list: %v, want the 404 naming GET /api/v3/api/v3/apps", base, err)
	}
	// without a path of its own, the route alone, as before
	_, _, err = runCmd(t, "ctl", "-api", base, "-token", ctlToken, "apps", "get", "nosuch")
	if err == nil || !strings.Contains(err.Error(), "GET /api/v3/apps/nosuch: 404") {
		t.Errorf("ctl apps get nosuch: %v, want the 404 naming GET /api/v3/apps/nosuch", err)
	}
}

// TestCtlBodyIsBounded: ctl reads a body from -f or stdin up to the
// control API's bound (1 MiB), not to the end: -f /dev/zero took memory
// until ctl died, and a pipe that never closes (here, 2 MiB and then
// silence) held ctl for ever, where the API would answer 413 anyway.
func TestCtlBodyIsBounded(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "body")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		_, _ = f.Write(append([]byte(`{"x":"`), make([]byte, 2<<20)...))
		<-stop // open, and silent: the body never ends
	}()
	for _, file := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() {
			_, _, err := runCmd(t, "ctl", "-api", "http://127.0.0.1:1", "apps", "put", "shop", "-f", file)
			done <- err
		}()
		select {
		case err := <-done:
			want := "ctl: the body in " + file + " is larger than 1 MiB, which the control API refuses"
			if err == nil || err.Error() != want {
				t.Errorf("-f %s: got %v\nwant %s", file, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("-f %s: ctl did not return in 10s", file)
		}
	}
}

// A body that is not JSON is named by where it came from, and an empty
// one says so: "ctl domains get D > d.json" that failed leaves d.json
// empty, and "put D -f d.json" then said only "the body is not valid
// JSON: unexpected end of JSON input (at byte 0)". Nothing is sent.
func TestCtlBodyNotJSONNamesItsSource(t *testing.T) {
	dir := t.TempDir()
	empty, bad := filepath.Join(dir, "d.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"app":}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", empty}, "ctl: the body in " + empty + " is empty: give a JSON object ({} for every default)"},
		{[]string{"-f", bad}, "ctl: the body in " + bad + " is not valid JSON: invalid character '}' looking for beginning of value (at byte 8)"},
		{[]string{""}, "ctl: the body is empty: give a JSON object ({} for every default)"},
		{[]string{"{bad"}, "ctl: the body is not valid JSON: invalid character 'b' looking for beginning of object key string (at byte 2)"},
	} {
		args := append([]string{"ctl", "-api", "http://127.0.0.1:1", "domains", "put", "shop.example.org"}, tc.args...)
		_, _, err := runCmd(t, args...)
		if err == nil || err.Error() != tc.want || exitCode(err, io.Discard) != 1 {
			t.Errorf("%q: %v\nwant %s, exit 1", tc.args, err, tc.want)
		}
	}
}

// TestCtlNamesWhereTheAPIURLCameFrom: a refused API URL that came from
// GATEHOUSE_API is named by the variable, not by -api, which the command
// line does not hold: the operator would look for a flag that is not
// there.
func TestCtlNamesWhereTheAPIURLCameFrom(t *testing.T) {
	t.Setenv("GATEHOUSE_API", "ftp://x")
	_, _, err := runCmd(t, "ctl", "apps", "list")
	if want := `ctl: GATEHOUSE_API must be an http(s) URL, got "ftp://x"`; err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	t.Setenv("GATEHOUSE_API", "http://127.0.0.1:1/?x=1")
	_, _, err = runCmd(t, "ctl", "apps", "list")
	if want := "ctl: GATEHOUSE_API must be a base URL without a query or fragment"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v\nwant %s…", err, want)
	}
	// -api wins over the variable, and is named when it is refused.
	_, _, err = runCmd(t, "ctl", "-api", "ftp://y", "apps", "list")
	if want := `ctl: -api must be an http(s) URL, got "ftp://y"`; err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestCtlRefusesTokenNoHeaderCarries: a token with a line break (a
// variable set from a file's contents) or another control byte is named
// as such, by where it came from and without repeating it. It failed as
// `net/http: invalid header field value for "Authorization"`, which does
// not say the token is what to fix.
func TestCtlRefusesTokenNoHeaderCarries(t *testing.T) {
	const secret = "ctl-secret-0123456789"
	t.Setenv("GATEHOUSE_CONTROL_TOKEN", secret+"\n")
	_, _, err := runCmd(t, "ctl", "-api", "http://127.0.0.1:1", "apps", "list")
	want := "ctl: the token in GATEHOUSE_CONTROL_TOKEN holds white space or a control byte (here 0x0a), which no Authorization header carries (a control token or a JWT has none)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	_, _, err = runCmd(t, "ctl", "-api", "http://127.0.0.1:1", "-token", secret+"\x7f", "apps", "list")
	want = "ctl: the token in -token holds white space or a control byte (here 0x7f), which no Authorization header carries (a control token or a JWT has none)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Error("the error repeats the token")
	}
}

// An explicit empty -token (-token "$T" with T unset) is refused before
// anything is sent: it fell back to GATEHOUSE_CONTROL_TOKEN without a
// word, sending a token the command line did not name.
func TestCtlRefusesEmptyTokenFlag(t *testing.T) {
	t.Setenv("GATEHOUSE_CONTROL_TOKEN", "ctl-env-token-0123456789")
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent = append(sent, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"apps":[]}`)
	}))
	defer srv.Close()
	const want = `ctl: -token is empty (an unset variable in -token "$T"?): give the token, or leave -token out to use GATEHOUSE_CONTROL_TOKEN`
	for _, args := range [][]string{
		{"ctl", "-api", srv.URL, "-token", "", "apps", "list"},
		{"ctl", "-api", srv.URL, "-token=", "apps", "list"},
		{"ctl", "-api", srv.URL, "apps", "list", "-token", ""}, // after the words
	} {
		_, _, err := runCmd(t, args...)
		if err == nil || err.Error() != want {
			t.Errorf("ctl %q: %v\nwant %s", args, err, want)
		}
	}
	if len(sent) != 0 {
		t.Errorf("requests sent with an empty -token, Authorization %q; want none", sent)
	}
	// Left out, -token is still the variable's.
	if _, _, err := runCmd(t, "ctl", "-api", srv.URL, "apps", "list"); err != nil || len(sent) != 1 || sent[0] != "Bearer ctl-env-token-0123456789" {
		t.Errorf("without -token: %v, Authorization %q; want the variable's token", err, sent)
	}
}

// ctl records list pages on from a cursor written as the record routes
// take a name, relative to the zone ("www/A", "@/A"): such a cursor was
// compared as typed, so "@/A" started the listing over from the first
// record and "www/A" repeated www's.
func TestCtlRecordsPageAfterRelativeName(t *testing.T) {
	url := startAPI(t)
	ctl := func(args ...string) (string, error) {
		out, _, err := runCmd(t, append([]string{"ctl", "-api", url, "-token", ctlToken}, args...)...)
		return out, err
	}
	if _, err := ctl("zones", "put", "apps.example.com", `{"gateways":["127.0.0.1"]}`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"@", "api", "www", "zz"} {
		if _, err := ctl("records", "put", "apps.example.com", name, "A", `{"values":["192.0.2.1"]}`); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ after, want string }{
		{"www.apps.example.com/A", "zz.apps.example.com"},
		{"www/A", "zz.apps.example.com"},
		{"@/A", "www.apps.example.com"},
		{"api/a", "apps.example.com"},
	} {
		out, err := ctl("-limit", "1", "-after", c.after, "records", "list", "apps.example.com")
		if err != nil {
			t.Fatalf("-after %s: %v", c.after, err)
		}
		var page struct{ Records []struct{ Name string } }
		if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Records) != 1 || page.Records[0].Name != c.want {
			t.Errorf("-after %s: %s, want the record set of %s", c.after, out, c.want)
		}
	}
	// One no record could have is refused, naming the cursor.
	if _, err := ctl("-limit", "1", "-after", "www.example.org./A", "records", "list", "apps.example.com"); err == nil || !strings.Contains(err.Error(), "400 Bad Request: after: record name") {
		t.Errorf("-after outside the zone: %v, want a 400 naming after", err)
	}
}

// An explicit empty -api is refused before anything is sent, as an empty
// -token is: it fell back to GATEHOUSE_API (or the default URL) without
// a word, sending the token to a gateway the command line did not name.
func TestCtlRefusesEmptyAPIFlag(t *testing.T) {
	var sent int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent++
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"apps":[]}`)
	}))
	defer srv.Close()
	t.Setenv("GATEHOUSE_API", srv.URL)
	const want = `ctl: -api is empty (an unset variable in -api "$URL"?): give the control API's base URL, or leave -api out to use GATEHOUSE_API, else http://127.0.0.1:9180`
	for _, args := range [][]string{
		{"ctl", "-api", "", "-token", ctlToken, "apps", "list"},
		{"ctl", "-token", ctlToken, "apps", "list", "-api="},
	} {
		if _, _, err := runCmd(t, args...); err == nil || err.Error() != want {
			t.Errorf("ctl %q: %v\nwant %s", args, err, want)
		}
	}
	if sent != 0 {
		t.Errorf("%d requests sent with an empty -api; want none", sent)
	}
	// Left out, -api is still the variable's.
	if _, _, err := runCmd(t, "ctl", "-token", ctlToken, "apps", "list"); err != nil || sent != 1 {
		t.Errorf("without -api: %v, %d requests; want one, to GATEHOUSE_API", err, sent)
	}
}
