package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

var resolveZones = []dns.Zone{{Name: "apps.example.com", Gateways: []netip.Addr{netip.MustParseAddr("192.0.2.7")}}}

// resolveEnv is an API whose sessions are real EdDSA tokens of issuer
// "idp"; sign returns one for sub (any audience will do).
func resolveEnv(t *testing.T, lim ResolveLimits) (e *env, sign func(sub string) string) {
	t.Helper()
	e, signClaims := resolveEnvWith(t, func(o *Options) { o.ResolveLimits = lim })
	return e, func(sub string) string {
		return signClaims(jwt.MapClaims{"sub": sub, "aud": "some-app"})
	}
}

// resolveEnvWith is resolveEnv with mod applied to the options, and a
// signer of any claims (iss and exp are added): a token with scope
// platform is the platform's credential.
func resolveEnvWith(t *testing.T, mod func(*Options)) (e *env, sign func(jwt.MapClaims) string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Options{Issuers: []auth.Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}})
	if err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, func(o *Options) {
		o.ResolveZones = func() []dns.Zone { return resolveZones }
		o.VerifySession = func(r *http.Request) (string, error) {
			tok, err := auth.BearerToken(r)
			if err != nil {
				return "", err
			}
			c, err := v.VerifyAny(tok)
			if err != nil {
				return "", err
			}
			return c.Subject, nil
		}
		o.VerifyPlatform = func(r *http.Request) error {
			tok, err := auth.BearerToken(r)
			if err != nil {
				return err
			}
			_, err = v.VerifyPlatform(tok)
			return err
		}
		mod(o)
	})
	return e, func(c jwt.MapClaims) string {
		c["iss"], c["exp"] = "idp", time.Now().Add(time.Hour).Unix()
		s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func batchOf(n int, name string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(fmt.Sprintf(`{"name":%q},`, name), n), ",") + "]"
}

func TestResolve(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	tests := []struct {
		name, method, path, tok string
		body                    any
		status                  int
		want                    string // in the body
	}{
		{"no session", "GET", "/api/v3/dns/resolve?name=a.apps.example.com", "", nil, 401, ""},
		{"the platform token is a session", "GET", "/api/v3/dns/resolve?name=a.apps.example.com", token, nil, 200, `"RA":false`},
		{"the platform without recursion is REFUSED off-zone", "GET", "/api/v3/dns/resolve?name=wikipedia.org", token, nil, 200, `{"Status":5,"TC":false,"RD":true,"RA":false,`},
		{"bad token", "GET", "/api/v3/dns/resolve?name=a.apps.example.com", "x.y.z", nil, 401, ""},
		{"A", "GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=A", alice, nil, 200,
			`{"Status":0,"TC":false,"RD":true,"RA":false,"AD":false,"CD":false,"Question":[{"name":"a.apps.example.com.","type":1}],"Answer":[{"name":"a.apps.example.com.","type":1,"TTL":60,"data":"192.0.2.7"}]}`},
		{"type defaults to A, by number", "GET", "/api/v3/dns/resolve?name=apps.example.com&type=6", alice, nil, 200, `"type":6,"TTL":60,"data":"ns.apps.example.com. hostmaster.apps.example.com.`},
		{"off-zone is REFUSED", "GET", "/api/v3/dns/resolve?name=wikipedia.org", alice, nil, 200, `{"Status":5,`},
		{"no name", "GET", "/api/v3/dns/resolve", alice, nil, 400, "name is required"},
		{"bad name", "GET", "/api/v3/dns/resolve?name=a%20b.apps.example.com", alice, nil, 400, "not a DNS name"},
		{"bad type", "GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=NOPE", alice, nil, 400, `type \"NOPE\"`},
		// ANY is answered as the DNS listener answers it: every record.
		{"ANY", "GET", "/api/v3/dns/resolve?name=apps.example.com&type=ANY", alice, nil, 200, `"type":2,"TTL":60,"data":"ns.apps.example.com."`},
		{"AXFR is refused", "GET", "/api/v3/dns/resolve?name=apps.example.com&type=AXFR", alice, nil, 400, `type \"AXFR\" is AXFR (252), a meta-type`},
		{"OPT by number is refused", "GET", "/api/v3/dns/resolve?name=apps.example.com&type=41", alice, nil, 400, `type \"41\" is OPT (41)`},
		{"a meta-type number is refused", "GET", "/api/v3/dns/resolve?name=apps.example.com&type=200", alice, nil, 400, `is TYPE200 (200), a meta-type`},
		{"batch TSIG is refused", "POST", "/api/v3/dns/resolve/batch", alice, `[{"name":"apps.example.com"},{"name":"apps.example.com","type":"TSIG"}]`, 400, `[1]: dns: type \"TSIG\" is TSIG (250)`},
		{"batch", "POST", "/api/v3/dns/resolve/batch", alice, `[{"name":"a.apps.example.com","type":"AAAA"},{"name":"example.org"}]`, 200, `"Status":5`},
		{"batch of 10", "POST", "/api/v3/dns/resolve/batch", alice, batchOf(10, "b.apps.example.com"), 200, ""},
		{"batch of 11", "POST", "/api/v3/dns/resolve/batch", alice, batchOf(11, "b.apps.example.com"), 400, "1 to 10 queries, got 11"},
		{"empty batch", "POST", "/api/v3/dns/resolve/batch", alice, `[]`, 400, "got 0"},
		{"batch bad query", "POST", "/api/v3/dns/resolve/batch", alice, `[{"name":"a.apps.example.com"},{"name":""}]`, 400, "[1]: dns: name is required"},
		{"batch not JSON", "POST", "/api/v3/dns/resolve/batch", alice, `{`, 400, "invalid JSON"},
		// an empty body stands for {} where an object is wanted; here it
		// was refused as "got a JSON object", which the client never sent
		{"batch empty body", "POST", "/api/v3/dns/resolve/batch", alice, "", 400, `"detail":"the body is empty: want an array"`},
		{"batch blank body", "POST", "/api/v3/dns/resolve/batch", alice, " \r\n", 400, `"detail":"the body is empty: want an array"`},
		{"batch unknown field", "POST", "/api/v3/dns/resolve/batch", alice, `[{"name":"a.apps.example.com","class":"IN"}]`, 400, "unknown field"},
		{"batch needs a session", "POST", "/api/v3/dns/resolve/batch", "", `[{"name":"a.apps.example.com"}]`, 401, ""},
	}
	for _, tt := range tests {
		r := e.do(tt.method, tt.path, tt.tok, tt.body)
		if r.status != tt.status || !strings.Contains(string(r.body), tt.want) {
			t.Errorf("%s: %d %s, want %d with %s", tt.name, r.status, r.body, tt.status, tt.want)
		}
		if r.status == 200 && (r.header.Get("X-RateLimit-Identity-Limit") != "300" || r.header.Get("X-RateLimit-Limit") != "600") {
			t.Errorf("%s: rate-limit fields %v", tt.name, r.header)
		}
	}
}

// TestResolveCharges: one unit per query against the address's window,
// the session's window and the session's daily quota.
func TestResolveCharges(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{
		PerIP:      limit.Quota{Limit: 30, Window: time.Minute},
		PerSession: limit.Quota{Limit: 12, Window: time.Minute},
		Daily:      1000,
	})
	alice, bob := sign("alice"), sign("bob")
	remaining := func(r resp) (ip, id string) {
		return r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Identity-Remaining")
	}
	r := e.do("POST", "/api/v3/dns/resolve/batch", alice, batchOf(10, "a.apps.example.com"))
	if ip, id := remaining(r); r.status != 200 || ip != "20" || id != "2" {
		t.Fatalf("batch of 10: %d, remaining ip %s identity %s, want 20 and 2", r.status, ip, id)
	}
	// 3 more do not fit alice's window: refused whole, nothing spent
	r = e.do("POST", "/api/v3/dns/resolve/batch", alice, batchOf(3, "a.apps.example.com"))
	if ip, id := remaining(r); r.status != 429 || r.header.Get("Retry-After") == "" || ip != "20" || id != "2" {
		t.Fatalf("over the session window: %d %v, want 429 with nothing spent", r.status, r.header)
	}
	// bob has his own window under the same address
	r = e.do("POST", "/api/v3/dns/resolve/batch", bob, batchOf(10, "a.apps.example.com"))
	if ip, id := remaining(r); r.status != 200 || ip != "10" || id != "2" {
		t.Fatalf("bob: %d, remaining ip %s identity %s, want 10 and 2", r.status, ip, id)
	}
	r = e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com", alice, nil)
	if ip, id := remaining(r); r.status != 200 || ip != "9" || id != "1" {
		t.Fatalf("alice again: %d, remaining ip %s identity %s", r.status, ip, id)
	}
}

func TestResolveDailyQuota(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{Daily: 5})
	alice := sign("alice")
	if r := e.do("POST", "/api/v3/dns/resolve/batch", alice, batchOf(5, "a.apps.example.com")); r.status != 200 {
		t.Fatalf("5 of 5: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com", alice, nil); r.status != 429 {
		t.Fatalf("the 6th query of the day: %d %s, want 429", r.status, r.body)
	}
	if r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com", sign("bob"), nil); r.status != 200 {
		t.Fatalf("another session: %d %s", r.status, r.body)
	}
}

// TestResolveHEAD: HEAD asks what GET would answer, headers only (RFC
// 9110 §9.3.2): the same status and rate-limit fields, 401 without a
// session, 400 for a bad name and 429 once the budget is spent, but it
// resolves nothing and so spends nothing. A monitor probing the route
// must not drain the session's window and daily quota.
func TestResolveHEAD(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{PerSession: limit.Quota{Limit: 2, Window: time.Minute}})
	alice := sign("alice")
	const path = "/api/v3/dns/resolve?name=a.apps.example.com"
	check := func(what string, r resp, status int, left string) {
		t.Helper()
		if r.status != status || r.header.Get("X-RateLimit-Identity-Remaining") != left || len(r.body) != 0 {
			t.Errorf("%s: %d, identity remaining %q, %d body bytes; want %d, %q, none", what, r.status,
				r.header.Get("X-RateLimit-Identity-Remaining"), len(r.body), status, left)
		}
	}
	for i := range 3 {
		r := e.do("HEAD", path, alice, nil)
		check(fmt.Sprintf("HEAD %d", i+1), r, 200, "2")
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("HEAD %d: Content-Type %q, want GET's", i+1, ct)
		}
	}
	for i, left := range []string{"1", "0"} {
		if r := e.do("GET", path, alice, nil); r.status != 200 || r.header.Get("X-RateLimit-Identity-Remaining") != left {
			t.Fatalf("GET %d: %d, identity remaining %q, want 200, %s", i+1, r.status, r.header.Get("X-RateLimit-Identity-Remaining"), left)
		}
	}
	r := e.do("HEAD", path, alice, nil)
	check("HEAD over the budget", r, 429, "0")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("HEAD over the budget: no Retry-After")
	}
	check("HEAD without a session", e.do("HEAD", path, "", nil), 401, "")
	check("HEAD with a bad name", e.do("HEAD", "/api/v3/dns/resolve?name=a%20b", alice, nil), 400, "")
}

// TestResolveHEADShowsTheBudgetAsItStands: a HEAD spends nothing, so
// its remaining counts are the budget as it stands, one more than those
// of a GET at the same moment, which are counted after the GET's own
// unit (DESIGN §8); and a GET that follows a HEAD finds what the HEAD
// said was left. A HEAD that showed the GET's counts would say a unit
// was gone that is not.
func TestResolveHEADShowsTheBudgetAsItStands(t *testing.T) {
	clock := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC) // fixed: the counts are exact
	e, signClaims := resolveEnvWith(t, func(o *Options) {
		o.ResolveLimits = ResolveLimits{PerIP: limit.Quota{Limit: 5, Window: time.Minute}, PerSession: limit.Quota{Limit: 3, Window: time.Minute}}
		o.Now = func() time.Time { return clock }
	})
	alice := signClaims(jwt.MapClaims{"sub": "alice", "aud": "some-app"})
	const path = "/api/v3/dns/resolve?name=a.apps.example.com"
	left := func(r resp) [2]string {
		return [2]string{r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Identity-Remaining")}
	}
	for i, want := range []struct {
		method string
		status int
		left   [2]string
	}{
		{"HEAD", 200, [2]string{"5", "3"}},
		{"GET", 200, [2]string{"4", "2"}},
		{"HEAD", 200, [2]string{"4", "2"}},
		{"HEAD", 200, [2]string{"4", "2"}},
		{"GET", 200, [2]string{"3", "1"}},
		{"HEAD", 200, [2]string{"3", "1"}},
		{"GET", 200, [2]string{"2", "0"}},
		{"HEAD", 429, [2]string{"2", "0"}},
		{"GET", 429, [2]string{"2", "0"}},
	} {
		r := e.do(want.method, path, alice, nil)
		if r.status != want.status || left(r) != want.left {
			t.Fatalf("%d: %s: %d, remaining (address, session) %q; want %d, %q", i, want.method, r.status, left(r), want.status, want.left)
		}
	}
}

// TestResolveChargeIsAtomic: a concurrent burst never spends the same
// remaining budget twice.
func TestResolveChargeIsAtomic(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{PerSession: limit.Quota{Limit: 20, Window: time.Minute}})
	alice := sign("alice")
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 30 {
		wg.Go(func() {
			r := e.do("POST", "/api/v3/dns/resolve/batch", alice, batchOf(3, "a.apps.example.com"))
			var out []dns.DoH
			if r.status == 200 && json.Unmarshal(r.body, &out) == nil && len(out) == 3 {
				mu.Lock()
				admitted++
				mu.Unlock()
			} else if r.status != 429 {
				t.Errorf("%d %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	if admitted != 6 { // 6 × 3 = 18 ≤ 20 < 7 × 3
		t.Errorf("%d batches of 3 admitted under a window of 20, want 6", admitted)
	}
}

// TestResolveRecursion: with recursion configured, off-zone names reach
// the upstream (a real resolver on loopback) only for the platform's
// credential, the static token or a platform-scope JWT; every other
// session still gets Status 5, and zone names are never forwarded.
func TestResolveRecursion(t *testing.T) {
	up := testutil.StartResolver(t, map[string]string{"wikipedia.org.": "198.51.100.9"})
	fwd, err := dns.NewForwarder(dns.ForwarderOptions{Upstreams: []string{up.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	e, sign := resolveEnvWith(t, func(o *Options) { o.Forwarder = fwd })
	alice := sign(jwt.MapClaims{"sub": "alice", "aud": "some-app"})
	platformJWT := sign(jwt.MapClaims{"sub": "ops", "scope": "platform"})
	const (
		refused    = `{"Status":5,"TC":false,"RD":true,"RA":false,"AD":false,"CD":false,"Question":[{"name":"wikipedia.org.","type":1}]}`
		recursed   = `{"Status":0,"TC":false,"RD":true,"RA":true,"AD":false,"CD":false,"Question":[{"name":"wikipedia.org.","type":1}],"Answer":[{"name":"wikipedia.org.","type":1,"TTL":300,"data":"198.51.100.9"}]}`
		inZone     = `{"Status":0,"TC":false,"RD":true,"RA":true,"AD":false,"CD":false,"Question":[{"name":"a.apps.example.com.","type":1}],"Answer":[{"name":"a.apps.example.com.","type":1,"TTL":60,"data":"192.0.2.7"}]}`
		nxdomain   = `{"Status":3,"TC":false,"RD":true,"RA":true,"AD":false,"CD":false,"Question":[{"name":"nx.example.org.","type":1}]}`
		offZoneGET = "/api/v3/dns/resolve?name=wikipedia.org&type=A"
	)
	tests := []struct {
		name, method, path, tok string
		body                    string
		want                    string
		forwarded               int // queries the upstream receives
	}{
		{"a session is REFUSED", "GET", offZoneGET, alice, "", refused, 0},
		{"a session's batch is REFUSED", "POST", "/api/v3/dns/resolve/batch", alice, `[{"name":"wikipedia.org"}]`, "[" + refused + "]", 0},
		{"the control token recurses", "GET", offZoneGET, token, "", recursed, 1},
		{"a platform JWT recurses", "GET", offZoneGET, platformJWT, "", recursed, 1},
		{"the platform's zone names are not forwarded", "GET", "/api/v3/dns/resolve?name=a.apps.example.com", token, "", inZone, 0},
		{"the platform's batch", "POST", "/api/v3/dns/resolve/batch", token,
			`[{"name":"wikipedia.org"},{"name":"a.apps.example.com"},{"name":"nx.example.org"}]`, "[" + recursed + "," + inZone + "," + nxdomain + "]", 2},
		// a DoH JSON client's cd=1 is the CD bit: echoed, forwarded or not
		{"cd=1 recursed", "GET", offZoneGET + "&cd=1", token, "", strings.Replace(recursed, `"CD":false`, `"CD":true`, 1), 1},
		{"cd=true in a zone", "GET", "/api/v3/dns/resolve?name=a.apps.example.com&cd=true", token, "", strings.Replace(inZone, `"CD":false`, `"CD":true`, 1), 0},
		{"cd=0", "GET", offZoneGET + "&cd=0", token, "", recursed, 1},
	}
	for _, tt := range tests {
		before := up.Queries()
		var body any
		if tt.body != "" {
			body = tt.body
		}
		r := e.do(tt.method, tt.path, tt.tok, body)
		if r.status != 200 || strings.TrimSpace(string(r.body)) != tt.want {
			t.Errorf("%s: %d %s\nwant 200 %s", tt.name, r.status, r.body, tt.want)
		}
		if got := up.Queries() - before; got != tt.forwarded {
			t.Errorf("%s: the upstream got %d queries, want %d", tt.name, got, tt.forwarded)
		}
	}

	// an upstream that is down is SERVFAIL (Status 2) for the platform
	dead, err := dns.NewForwarder(dns.ForwarderOptions{Upstreams: []string{testutil.FreeAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	e, _ = resolveEnvWith(t, func(o *Options) { o.Forwarder = dead })
	if r := e.do("GET", offZoneGET, token, nil); r.status != 200 || !strings.HasPrefix(string(r.body), `{"Status":2,"TC":false,"RD":true,"RA":true,`) {
		t.Errorf("upstream down: %d %s", r.status, r.body)
	}
}

// TestStaticTokenQueryRule: the static control.token is read by the rule
// a platform JWT is read by (auth.BearerToken), on the control routes and
// the resolve routes alike. Repeated in a token-like query parameter, or
// sent in two Authorization headers, either credential is refused; beside
// a query token of another value (the app's own ?token=) it is accepted,
// and the route then refuses the query field it does not take (400, not
// the 401 of a refused credential).
func TestStaticTokenQueryRule(t *testing.T) {
	e, sign := resolveEnvWith(t, func(*Options) {})
	creds := map[string]string{
		"control.token": token,
		"platform JWT":  sign(jwt.MapClaims{"sub": "ops", "scope": "platform"}),
	}
	const inQuery = "tokens are accepted in the Authorization header only, never in the query string"
	routes := []struct{ method, path, body string }{
		{"GET", "/api/v3/apps", ""},
		{"GET", "/api/v3/dns/resolve?name=a.apps.example.com", ""},
		{"POST", "/api/v3/dns/resolve/batch", `[{"name":"a.apps.example.com"}]`},
	}
	tests := []struct {
		name   string
		query  func(tok string) string // added to the route's query
		twice  bool                    // a second Authorization header
		want   int
		detail string // in the 401's body
	}{
		{name: "the header alone", want: 200},
		{name: "the header's token also in ?token=", query: func(tok string) string { return "token=" + url.QueryEscape(tok) }, want: 401, detail: inQuery},
		{name: "the header's token also in ?Access_Token=", query: func(tok string) string { return "Access_Token=" + url.QueryEscape(tok) }, want: 401, detail: inQuery},
		{name: "another ?token= is the app's own", query: func(string) string { return "token=reset-123" }, want: 400, detail: `query field \"token\" is not taken here`},
		{name: "two Authorization headers", twice: true, want: 401},
	}
	for _, rt := range routes {
		for _, tt := range tests {
			for cred, tok := range creds {
				target := e.srv.URL + rt.path
				if tt.query != nil {
					sep := "?"
					if strings.Contains(rt.path, "?") {
						sep = "&"
					}
					target += sep + tt.query(tok)
				}
				req, err := http.NewRequest(rt.method, target, strings.NewReader(rt.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+tok)
				if tt.twice {
					req.Header.Add("Authorization", "Bearer "+tok)
				}
				res, err := e.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tt.want || !strings.Contains(string(b), tt.detail) {
					t.Errorf("%s %s, %s, %s: status %d, want %d %q: %s", rt.method, rt.path, cred, tt.name, res.StatusCode, tt.want, tt.detail, b)
				}
			}
		}
	}
}

// TestPublicRouteWrongMethod: a public route asked with another method is
// 405 with Allow, to anyone: not the control API's 401 (which tells a
// signed-in session its token is wrong, and meters it as a guess) nor its
// 404.
func TestPublicRouteWrongMethod(t *testing.T) {
	// one wrong token spends the address's guessing window: a session
	// that only used the wrong method must not be counted as one
	e, sign := resolveEnvWith(t, func(o *Options) { o.BadTokens = limit.Quota{Limit: 1, Window: time.Hour} })
	sess := sign(jwt.MapClaims{"sub": "alice", "aud": "some-app"})
	cases := []struct {
		method, path, allow string
	}{
		{"POST", "/api/v3/dns/resolve?name=apps.example.com&type=A", "GET"},
		{"DELETE", "/api/v3/dns/resolve", "GET"},
		{"GET", "/api/v3/dns/resolve/batch", "POST"},
		{"PUT", "/api/v3/discovery/clusters", "GET"},
	}
	for _, c := range cases {
		for _, tok := range []string{"", sess, token} {
			r := e.do(c.method, c.path, tok, `[{"name":"apps.example.com","type":"A"}]`)
			if r.status != 405 || !strings.Contains(r.header.Get("Allow"), c.allow) {
				t.Errorf("%s %s (token %.6q): %d Allow=%q, want 405 allowing %s: %s", c.method, c.path, tok, r.status, r.header.Get("Allow"), c.allow, r.body)
				continue
			}
			problemOf(t, r)
		}
	}
	if r := e.do("GET", "/api/v3/dns/resolve?name=apps.example.com&type=A", sess, nil); r.status != 200 {
		t.Errorf("resolve after the wrong methods: %d, want 200: %s", r.status, r.body)
	}
}

// TestResolveFieldGivenTwice: a resolve query whose name or type is given
// twice answers 400 naming the field, and charges nothing, rather than
// answering the first one given: the client meant one of them, and the
// gateway cannot know which (paging refuses a repeated field likewise).
func TestResolveFieldGivenTwice(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	for _, q := range []struct{ query, field string }{
		{"name=a.apps.example.com&name=b.apps.example.com", "name"},
		{"name=a.apps.example.com&type=A&type=TXT", "type"},
		{"name=a.apps.example.com&type=A&type=A", "type"},
	} {
		r := e.do("GET", "/api/v3/dns/resolve?"+q.query, alice, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), q.field+": given 2 times") {
			t.Errorf("?%s: %d %s, want 400 naming %s", q.query, r.status, r.body, q.field)
		}
	}
	r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com", alice, nil)
	if r.status != 200 || r.header.Get("X-RateLimit-Identity-Remaining") != "299" {
		t.Errorf("after the refused queries: %d, identity remaining %q, want 200 and 299 (nothing charged)", r.status, r.header.Get("X-RateLimit-Identity-Remaining"))
	}
}

// TestResolveQueryThatDoesNotParse: a resolve query with a pair that does
// not parse (a bad %-escape, a ';' separator) answers 400 and charges
// nothing, rather than dropping the pair: ?type=TXT; was answered as the
// default type A, another question than the client asked.
func TestResolveQueryThatDoesNotParse(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	for _, q := range []string{
		"name=a.apps.example.com&type=TXT;",
		"name=a.apps.example.com&type=%ZZ",
		"type=AAAA%&name=a.apps.example.com",
	} {
		r := e.do("GET", "/api/v3/dns/resolve?"+q, alice, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "does not parse") {
			t.Errorf("?%s: %d %s, want 400 saying the query does not parse", q, r.status, r.body)
		}
	}
	r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com", alice, nil)
	if r.status != 200 || r.header.Get("X-RateLimit-Identity-Remaining") != "299" {
		t.Errorf("after the refused queries: %d, identity remaining %q, want 200 and 299 (nothing charged)", r.status, r.header.Get("X-RateLimit-Identity-Remaining"))
	}
}

// TestResolveEmptyFinalLabel: a name that ends in two dots has an empty
// label, and is no DNS name: 400, not the question for the name with one
// dot less ("a.example.." asked as a.example, ".." as the root).
func TestResolveEmptyFinalLabel(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	for _, name := range []string{"a.apps.example.com..", "..", "a.apps.example.com..."} {
		r := e.do("GET", "/api/v3/dns/resolve?name="+url.QueryEscape(name), alice, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "not a DNS name") {
			t.Errorf("GET name %q: %d %s, want 400", name, r.status, r.body)
		}
		r = e.do("POST", "/api/v3/dns/resolve/batch", alice, `[{"name":`+strconv.Quote(name)+`}]`)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "not a DNS name") {
			t.Errorf("batch name %q: %d %s, want 400", name, r.status, r.body)
		}
	}
	if r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com.", alice, nil); r.status != 200 {
		t.Errorf("a name with its one final dot: %d %s", r.status, r.body)
	}
}
