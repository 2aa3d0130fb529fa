package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func authApps() []*route.App {
	return []*route.App{{ID: "shop", Auth: route.Auth{Required: true}}, {ID: "open"}}
}

func TestAuthThroughChain(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	good := e.token(nil)
	cases := []struct {
		name   string
		path   string
		hdr    http.Header
		status int
	}{
		{"valid", "/", edgeBearer(good), 200},
		{"aud star", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["aud"] = "*" })), 200},
		{"missing", "/", nil, 401},
		{"not bearer", "/", http.Header{"Authorization": {"Basic YTpi"}}, 401},
		{"query token", "/?access_token=" + good, nil, 401},
		{"query token beside a good header", "/?token=" + good, edgeBearer(good), 401},
		{"query jwt", "/?jwt=" + good, nil, 401},
		{"an app's own token parameter beside a good header", "/reset?token=r3s3t", edgeBearer(good), 200},
		// RFC 6750 §2: one method per request, and access_token is the
		// query method's own name: never an app's parameter.
		{"access_token of another token beside a good header", "/?access_token=forged", edgeBearer(good), 401},
		{"empty access_token beside a good header", "/?x=1&ACCESS_TOKEN=", edgeBearer(good), 401},
		// Rack 2 and Python before 3.9.2 split the query on ';' too.
		{"access_token after a semicolon beside a good header", "/?x=1;access_token=forged", edgeBearer(good), 401},
		// PHP names a query parameter for $_GET as it names a variable:
		// leading blanks dropped, ' ' and '.' made '_', a '[' with no ']'
		// made '_', a name with [...] an array of that name. Each of these
		// is $_GET['access_token'] to a PHP host.
		{"PHP's access.token beside a good header", "/?access.token=forged", edgeBearer(good), 401},
		{"PHP's access+token beside a good header", "/?access+token=forged", edgeBearer(good), 401},
		{"PHP's +access_token beside a good header", "/?x=1&+access_token=forged", edgeBearer(good), 401},
		{"PHP's access[token beside a good header", "/?access[token=forged", edgeBearer(good), 401},
		{"PHP's access_token[] beside a good header", "/?access_token[]=forged", edgeBearer(good), 401},
		{"PHP's access_token%00 beside a good header", "/?access_token%00.x=forged", edgeBearer(good), 401},
		{"a parameter PHP names access_token.x is the app's", "/?access_token.x=1&access_token[x=2", edgeBearer(good), 200},
		{"malformed", "/", edgeBearer("a.b.c"), 401},
		{"expired", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), 401},
		{"not yet valid", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), 401},
		// An nbf past any date a time holds wrapped round to the far past.
		{"not valid before an unthinkable year", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["nbf"] = 1e19 })), 401},
		{"wrong signature", "/", edgeBearer(edgeSign(t, otherKey, nil)), 401},
		{"unknown issuer", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["iss"] = "other" })), 401},
		{"alg none", "/", edgeBearer(noneToken(t)), 401},
		// RFC 6749 §3.3 delimits scopes by spaces alone: "read\twrite" is
		// one scope, and no scope-token, not the scopes read and write.
		{"scopes split by a tab", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["scope"] = "read\twrite" })), 401},
		{"scopes split by a no-break space", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["scope"] = "read\u00a0write" })), 401},
		{"other app's audience", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["aud"] = []string{"blog"} })), 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.backendOf("shop").count()
			hdr := http.Header{"X-Gatehouse-Subject": {"mallory"}, "X-Gatehouse-Issuer": {"evil"}}
			for k, v := range c.hdr {
				hdr[k] = v
			}
			res, body := e.do(edgeReq{app: "shop", path: c.path, hdr: hdr})
			reached := e.backendOf("shop").count() > before
			if c.status != 200 {
				edgeProblem(t, res, body, c.status)
				if reached {
					t.Fatal("the host saw a refused request")
				}
				if res.Header.Get("WWW-Authenticate") == "" {
					t.Fatal("no WWW-Authenticate challenge")
				}
				if got := res.Header.Get("WWW-Authenticate"); strings.Contains(c.path, "?") && !strings.Contains(got, `error="invalid_request"`) {
					t.Fatalf("a token in the query string: challenge %q, want error=\"invalid_request\"", got)
				}
				return
			}
			if res.StatusCode != 200 || !reached {
				t.Fatalf("status %d, reached %v: %s", res.StatusCode, reached, body)
			}
			got := e.backendOf("shop").all()[before]
			if got.Header.Get("Authorization") != c.hdr.Get("Authorization") {
				t.Errorf("token not forwarded verbatim: %q", got.Header.Get("Authorization"))
			}
			if got.Header.Get("X-Gatehouse-Subject") != "alice" || got.Header.Get("X-Gatehouse-Scopes") != "read write" {
				t.Errorf("context headers: subject %q scopes %q", got.Header.Get("X-Gatehouse-Subject"), got.Header.Get("X-Gatehouse-Scopes"))
			}
			// Two issuers may each have an alice: the pair names the user.
			if iss := got.Header.Values("X-Gatehouse-Issuer"); len(iss) != 1 || iss[0] != "idp" {
				t.Errorf("X-Gatehouse-Issuer %q, want the token's issuer alone", iss)
			}
		})
	}
	// The same through the proxy's other path (a request with a body).
	before := e.backendOf("shop").count()
	if res, body := e.do(edgeReq{method: "POST", app: "shop", path: "/", hdr: edgeBearer(good), body: strings.NewReader("x")}); res.StatusCode != 200 {
		t.Fatalf("POST: %d %s", res.StatusCode, body)
	}
	if got := e.backendOf("shop").all()[before].Header; got.Get("X-Gatehouse-Issuer") != "idp" || got.Get("X-Gatehouse-Subject") != "alice" {
		t.Errorf("POST: subject %q issuer %q", got.Get("X-Gatehouse-Subject"), got.Get("X-Gatehouse-Issuer"))
	}
	// An app without auth.required needs no token and gets no subject.
	res, _ := e.do(edgeReq{app: "open", path: "/", hdr: http.Header{"X-Gatehouse-Subject": {"mallory"}}})
	if res.StatusCode != 200 {
		t.Fatalf("open app: %d", res.StatusCode)
	}
	if s := e.backendOf("open").all()[0].Header.Get("X-Gatehouse-Subject"); s != "" {
		t.Fatalf("open app got subject %q", s)
	}
}

// TestAuthChallenges: the WWW-Authenticate of each refusal says what
// RFC 6750 §3.1 says it should, since OAuth clients act on it (on
// invalid_token they fetch a new token and try again). A request with no
// bearer credential at all, another scheme's included, gets the bare
// challenge; a token sent two ways or in two fields is a malformed request;
// only a token that fails verification is invalid_token.
func TestAuthChallenges(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	good := e.token(nil)
	_, forger, _ := ed25519.GenerateKey(rand.Reader)
	const forged = "the token's signature does not verify with a key of an issuer this gateway trusts"
	const bare = `Bearer realm="gatehouse"`
	cases := []struct {
		name   string
		path   string
		hdr    http.Header
		status int
		want   string
	}{
		{"no credentials", "/", nil, 401, bare},
		{"another scheme", "/", http.Header{"Authorization": {"Basic YTpi"}}, 401, bare},
		{"Bearer and nothing", "/", http.Header{"Authorization": {"Bearer"}}, 401, bare},
		{"Bearer and blanks", "/", http.Header{"Authorization": {"Bearer   "}}, 401, bare},
		{"two Authorization fields", "/", http.Header{"Authorization": {"Bearer " + good, "Bearer " + good}}, 401, bare + `, error="invalid_request", error_description="send one bearer token, in one Authorization header"`},
		{"header and query", "/?access_token=" + good, edgeBearer(good), 401, bare + `, error="invalid_request", error_description="tokens are accepted in the Authorization header only, never in the query string"`},
		{"expired", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), 401, bare + `, error="invalid_token", error_description="the token has expired"`},
		{"not valid yet", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), 401, bare + `, error="invalid_token", error_description="the token is not valid yet (its nbf is in the future)"`},
		{"forged", "/", edgeBearer(edgeSign(t, forger, nil)), 401, bare + `, error="invalid_token", error_description="` + forged + `"`},
		{"forged and expired", "/", edgeBearer(edgeSign(t, forger, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), 401, bare + `, error="invalid_token", error_description="` + forged + `"`},
		{"not a JWT", "/", edgeBearer("abc"), 401, bare + `, error="invalid_token", error_description="the token is not a well-formed JWT"`},
		{"another app's token", "/", edgeBearer(e.token(func(c jwt.MapClaims) { c["aud"] = "blog" })), 403, bare + `, error="insufficient_scope", error_description="the token's audience (aud) does not cover this app"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := e.do(edgeReq{app: "shop", path: c.path, hdr: c.hdr})
			edgeProblem(t, res, body, c.status)
			if got := res.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != c.want {
				t.Fatalf("WWW-Authenticate %q, want %q", got, c.want)
			}
			// the problem's detail says what the challenge does
			var p problem.Problem
			_ = json.Unmarshal([]byte(body), &p)
			if _, desc, ok := strings.Cut(c.want, `error_description="`); ok && c.status == 401 && !strings.Contains(p.Detail, strings.Split(desc, `"`)[0]) {
				t.Fatalf("detail %q does not say %q", p.Detail, desc)
			}
		})
	}
}

// TestAuthKeyIDOfNoKey: a token whose kid names no key of its issuer's
// JWKS is refused as one with a bad signature is, with the same status,
// challenge and problem, even when the key that signed it is in the set
// under another kid: its issuer said which key to check it with, and the
// gateway has none such.
func TestAuthKeyIDOfNoKey(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	jwks := filepath.Join(t.TempDir(), "idp.jwks")
	if err := os.WriteFile(jwks, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+base64.RawURLEncoding.EncodeToString(pub)+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEdgeEnv(t, "apps.test", authApps(), func(o *Options) {
		o.Edge.Auth.Issuers = []auth.Issuer{{Name: "idp", KeysFile: jwks}}
	})
	signed := func(key ed25519.PrivateKey, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "idp", "sub": "alice", "aud": "shop", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(signed(priv, "k1"))}); res.StatusCode != 200 {
		t.Fatalf("kid k1 by k1's key: %d %s", res.StatusCode, body)
	}
	badSig, badBody := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(signed(other, "k1"))})
	edgeProblem(t, badSig, badBody, 401)
	before := e.backendOf("shop").count()
	res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(signed(priv, "k2"))})
	edgeProblem(t, res, body, 401)
	if e.backendOf("shop").count() != before {
		t.Fatal("the host saw a token whose kid names no key")
	}
	if got, want := res.Header.Values("WWW-Authenticate"), badSig.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != want[0] || got[0] != `Bearer realm="gatehouse", error="invalid_token", error_description="the token's signature does not verify with a key of an issuer this gateway trusts"` {
		t.Fatalf("WWW-Authenticate %q, want a bad signature's %q", got, want)
	}
	var p, q problem.Problem
	if json.Unmarshal([]byte(body), &p) != nil || json.Unmarshal([]byte(badBody), &q) != nil || p.Detail != q.Detail {
		t.Fatalf("problem %q, want a bad signature's %q", body, badBody)
	}
}

func noneToken(t *testing.T) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": "idp", "sub": "alice", "aud": "*", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestClaimLimitsRPSAndConnections(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	rps := e.token(func(c jwt.MapClaims) { c["sub"] = "rps-user"; c["limits"] = map[string]int{"rps": 2} })
	codes := []int{}
	for range 3 {
		res, _ := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(rps)})
		codes = append(codes, res.StatusCode)
		if res.StatusCode == 429 && res.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if !edgeEqualInts(codes, []int{200, 200, 429}) {
		t.Fatalf("rps 2: %v", codes)
	}
	e.advance(1500 * time.Millisecond) // the budget refills at 2 a second
	if res, _ := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(rps)}); res.StatusCode != 200 {
		t.Fatalf("after 1.5 s: %d", res.StatusCode)
	}

	// connections: one request held open by the backend, the second refused
	conn := e.token(func(c jwt.MapClaims) { c["sub"] = "conn-user"; c["limits"] = map[string]int{"connections": 1} })
	release := make(chan struct{})
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		w.Write([]byte("ok"))
	})
	held := make(chan int, 1)
	go func() {
		res, _ := e.do(edgeReq{app: "shop", path: "/hold", hdr: edgeBearer(conn)})
		held <- res.StatusCode
	}()
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.gw.edge.subjects.Active(limit.Subject{Issuer: "idp", Sub: "conn-user"}) == 1 }, "the held request never arrived")
	res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(conn)})
	edgeProblem(t, res, body, 429)
	close(release)
	if code := <-held; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.gw.edge.subjects.Active(limit.Subject{Issuer: "idp", Sub: "conn-user"}) == 0 }, "connection slot not released")
	if res, _ := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(conn)}); res.StatusCode != 200 {
		t.Fatalf("after release: %d", res.StatusCode)
	}
	if got := edgeCounter(t, e.reg, "gatehouse_rate_limited_total", map[string]string{"app": "shop", "limit": "connections"}); got != 1 {
		t.Fatalf("rate_limited_total{connections} = %v", got)
	}
}

// TestClaimByteRates measures that a response and an upload over their
// byte rate are slowed to it (throughput ≈ rate), and arrive whole.
func TestClaimByteRates(t *testing.T) {
	t.Parallel() // mostly waits on its byte rates; its own servers, no process-wide state

	const rate = 32 << 10 // bytes per second
	const size = 64 << 10
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	payload := bytes.Repeat([]byte("x"), size)
	uploaded := make(chan int, 1)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			w.Write(payload)
			return
		}
		b, _ := io.ReadAll(r.Body)
		uploaded <- len(b)
	})
	within := func(t *testing.T, what string, n int, d time.Duration) {
		bps := float64(n) / d.Seconds()
		t.Logf("%s: %d bytes in %s = %.0f B/s (rate %d B/s)", what, n, d.Round(time.Millisecond), bps, rate)
		// the first burst (a tenth of a second's worth) passes at once
		if bps > rate*1.3 || d > 10*time.Second {
			t.Fatalf("%s: %.0f B/s in %s, want about %d B/s", what, bps, d, rate)
		}
	}
	t.Run("write_Bps", func(t *testing.T) {
		t.Parallel()
		tok := e.token(func(c jwt.MapClaims) { c["sub"] = "w"; c["limits"] = map[string]int{"write_Bps": rate} })
		start := time.Now()
		res, body := e.do(edgeReq{app: "shop", path: "/big", hdr: edgeBearer(tok)})
		d := time.Since(start)
		if res.StatusCode != 200 || len(body) != size {
			t.Fatalf("status %d, %d bytes: the response was cut", res.StatusCode, len(body))
		}
		within(t, "response", size, d)
	})
	t.Run("read_Bps", func(t *testing.T) {
		t.Parallel()
		tok := e.token(func(c jwt.MapClaims) { c["sub"] = "r"; c["limits"] = map[string]int{"read_Bps": rate} })
		start := time.Now()
		res, _ := e.do(edgeReq{method: "POST", app: "shop", path: "/upload", hdr: edgeBearer(tok), body: bytes.NewReader(payload)})
		d := time.Since(start)
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		if got := <-uploaded; got != size {
			t.Fatalf("the host received %d of %d bytes: the upload was cut", got, size)
		}
		within(t, "upload", size, d)
	})
}

// TestClaimByteRatesOnUpgrade holds a WebSocket to its token's byte
// rates: after the 101 the proxy copies a hijacked connection, not the
// request body and response writer, and the budget must follow it there.
func TestClaimByteRatesOnUpgrade(t *testing.T) {
	t.Parallel() // mostly waits on its byte rates; its own servers, no process-wide state

	const rate = 32 << 10 // bytes per second
	const size = 64 << 10
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	payload := bytes.Repeat([]byte("x"), size)
	upstream := make(chan time.Duration, 1) // how long the client's bytes took to reach the host
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		if r.URL.Path == "/down" {
			_, _ = brw.Write(payload)
			_ = brw.Flush()
			_, _ = io.Copy(io.Discard, brw) // until the client closes
			return
		}
		_ = brw.Flush()
		start := time.Now()
		if _, err := io.ReadFull(brw, make([]byte, size)); err == nil {
			upstream <- time.Since(start)
		}
	})
	within := func(t *testing.T, what string, d time.Duration) {
		bps := float64(size) / d.Seconds()
		t.Logf("%s: %d bytes in %s = %.0f B/s (rate %d B/s)", what, size, d.Round(time.Millisecond), bps, rate)
		if bps > rate*1.3 || d > 10*time.Second {
			t.Fatalf("%s: %.0f B/s in %s, want about %d B/s", what, bps, d, rate)
		}
	}
	upgrade := func(t *testing.T, path, sub, claim string) (net.Conn, *bufio.Reader) {
		tok := e.token(func(c jwt.MapClaims) { c["sub"] = sub; c["limits"] = map[string]int{claim: rate} })
		c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: shop.apps.test\r\nAuthorization: Bearer "+tok+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", res, err)
		}
		return c, br
	}
	t.Run("write_Bps", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, br := upgrade(t, "/down", "ws-w", "write_Bps")
		if _, err := io.ReadFull(br, make([]byte, size)); err != nil {
			t.Fatalf("the stream was cut: %v", err)
		}
		within(t, "downstream", time.Since(start))
	})
	t.Run("read_Bps", func(t *testing.T) {
		t.Parallel()
		c, _ := upgrade(t, "/up", "ws-r", "read_Bps")
		if _, err := c.Write(payload); err != nil {
			t.Fatalf("the stream was cut: %v", err)
		}
		select {
		case d := <-upstream:
			within(t, "upstream", d)
		case <-time.After(15 * time.Second):
			t.Fatal("the host never received the upload")
		}
	})
}

// TestSSEAuthExpired streams events under a token that expires in about
// two seconds: the stream ends with an auth-expired event and the host's
// request is cancelled.
func TestSSEAuthExpired(t *testing.T) {
	for _, c := range []struct {
		name   string
		leeway time.Duration
		exp    time.Duration // from now
	}{
		{"expires in 2s", 0, 2 * time.Second},
		// Admitted inside the leeway, the stream lasts until exp plus
		// the leeway, as the token does, not one event.
		{"expired 1s ago, 3s leeway", 3 * time.Second, -time.Second},
	} {
		t.Run(c.name, func(t *testing.T) { testSSEAuthExpired(t, c.leeway, c.exp) })
	}
}

func testSSEAuthExpired(t *testing.T, leeway, exp time.Duration) {
	e := newEdgeEnv(t, "apps.test", authApps(), func(o *Options) { o.Edge.Auth.Leeway = leeway })
	hostDone := make(chan struct{})
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(hostDone)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 400; i++ { // bounded: 20 s at most
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	})
	tok := e.token(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(exp).Unix() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/events", nil)
	r.Host = e.host("shop")
	r.Header.Set("Authorization", "Bearer "+tok)
	res, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var lines []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if ctx.Err() != nil {
		t.Fatal("the stream did not end when the token expired")
	}
	all := strings.Join(lines, "\n")
	if n := strings.Count(all, "data: tick"); n < 5 {
		t.Fatalf("%d events before expiry, want a second's worth: %q", n, all)
	}
	i := strings.LastIndex(all, "event: auth-expired\ndata: ")
	if i < 0 || strings.Contains(all[i:], "tick") {
		t.Fatalf("stream does not end with auth-expired: ...%q", all[max(0, len(all)-200):])
	}
	select {
	case <-hostDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the host's request was not cancelled")
	}
}

func TestClaimLimitsNeedVerification(t *testing.T) {
	g := &Gateway{}
	err := g.initEdge(EdgeOptions{Auth: auth.Options{ClaimLimits: true}})
	if err == nil || !strings.Contains(err.Error(), "verification is off") {
		t.Fatalf("initEdge: %v", err)
	}
	if err := (auth.Options{ClaimLimits: true}).Validate(); err == nil {
		t.Fatal("Validate accepted claim limits without issuers")
	}
}

// TestClaimByteRatesOnUpgradeHalfClose: a connection upgraded under byte
// rates keeps the proxy's half-close as one without them does. The host
// ends its side; the client still sends, and the host still gets it:
// the rates slow the stream, they never cut it.
func TestClaimByteRatesOnUpgradeHalfClose(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	got := make(chan string, 1)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nbye")
		_ = brw.Flush()
		_ = c.(*net.TCPConn).CloseWrite() // the host is done sending
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(brw) // what the client sends after, until its EOF
		got <- string(b)
	})
	for _, limits := range []map[string]int{nil, {"write_Bps": 32 << 10}, {"read_Bps": 32 << 10}} {
		t.Run(fmt.Sprint(limits), func(t *testing.T) {
			tok := e.token(func(c jwt.MapClaims) {
				c["sub"] = "half"
				if limits != nil {
					c["limits"] = limits
				}
			})
			c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			_, _ = io.WriteString(c, "GET /half HTTP/1.1\r\nHost: shop.apps.test\r\nAuthorization: Bearer "+tok+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: %v %v", res, err)
			}
			if b, err := io.ReadAll(br); err != nil || string(b) != "bye" {
				t.Fatalf("from the host: %q %v, want bye then EOF", b, err)
			}
			if _, err := io.WriteString(c, "late words"); err != nil {
				t.Fatalf("write after the host's half-close: %v", err)
			}
			_ = c.(*net.TCPConn).CloseWrite()
			select {
			case s := <-got:
				if s != "late words" {
					t.Fatalf("the host got %q after its half-close, want %q", s, "late words")
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the host never got the client's end")
			}
		})
	}
}

// TestSSEAuthExpiredMidEvent: a token that expires while the host is in
// the middle of an event (part of it flushed, the rest still to come)
// still ends the stream with an auth-expired event a client can read:
// the host's unfinished event is never glued to it. Parsed as
// EventSource parses a stream, the last event is auth-expired with its
// own data, and no event carries the host's unfinished bytes.
//
// An unfinished event longer than the gateway holds back (maxHeld) was
// passed on: the client still gets an event typed auth-expired.
func TestSSEAuthExpiredMidEvent(t *testing.T) {
	t.Parallel() // waits out token lives; its own servers, no process-wide state
	long := "data: unfin" + strings.Repeat("x", maxHeld)
	for _, tail := range []string{
		"data: unfini",           // mid-line
		"data: unfinished\n",     // a whole line, no blank line yet
		"data: a\r\ndata: unfin", // CRLF line ends
		"data: a\r\n\r",          // a CRLF then a CR: a blank line
		": hb\ndata: unfin",      // a comment line, then an unfinished event
		"",                       // at an event boundary
		long,
	} {
		name := fmt.Sprintf("%q", tail)
		if tail == long {
			name = "longer than maxHeld"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits out its token's life
			e := newEdgeEnv(t, "apps.test", authApps(), nil)
			e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: one\n\n"+tail)
				w.(http.Flusher).Flush()
				select { // the rest of the event never comes before the token expires
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			})
			// exp is in whole seconds: now+1s cut to the second left the
			// token anywhere from 0 to 1 s, and a busy machine sent it
			// expired (401, no stream). Rounded up from now+1s it has at
			// least a second, for the stream to begin before it expires.
			exp := time.Now().Add(2*time.Second - time.Nanosecond).Truncate(time.Second)
			tok := e.token(func(c jwt.MapClaims) { c["exp"] = exp.Unix() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/events", nil)
			r.Host = e.host("shop")
			r.Header.Set("Authorization", "Bearer "+tok)
			res, err := e.srv.Client().Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			if ctx.Err() != nil {
				t.Fatal("the stream did not end when the token expired")
			}
			evs := parseSSE(string(raw))
			if res.StatusCode != http.StatusOK || len(evs) < 2 || evs[0] != (sseEvent{"message", "one"}) {
				t.Fatalf("%d %q: want the host's first event, then the end of the stream", res.StatusCode, raw)
			}
			last := evs[len(evs)-1]
			if tail == long {
				if last.typ != "auth-expired" {
					t.Fatalf("last event type %q, want auth-expired", last.typ)
				}
				return
			}
			if tail == "data: a\r\n\r" && (len(evs) != 3 || evs[1] != (sseEvent{"message", "a"})) {
				t.Fatalf("events %+v, want the host's complete \"a\" before auth-expired", evs)
			}
			if last.typ != "auth-expired" || !strings.HasPrefix(last.data, `{"reason":`) {
				t.Fatalf("last event %+v, want auth-expired with its own data; stream %q", last, raw)
			}
			for _, ev := range evs {
				if strings.Contains(ev.data, "unfin") {
					t.Fatalf("an event carries the host's unfinished bytes: %+v; stream %q", ev, raw)
				}
			}
		})
	}
}

type sseEvent struct{ typ, data string }

// parseSSE dispatches events as the HTML standard's EventSource does
// (lines end in CRLF, LF or CR; a blank line dispatches; an unfinished
// event at the end is dropped).
func parseSSE(s string) []sseEvent {
	var out []sseEvent
	var typ string
	var data []string
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	lines := strings.Split(s, "\n")
	for _, l := range lines[:len(lines)-1] { // the last piece has no line end
		switch {
		case l == "":
			if data != nil {
				if typ == "" {
					typ = "message"
				}
				out = append(out, sseEvent{typ, strings.Join(data, "\n")})
			}
			typ, data = "", nil
		case strings.HasPrefix(l, ":"):
		default:
			k, v, _ := strings.Cut(l, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "event":
				typ = v
			case "data":
				data = append(data, v)
			}
		}
	}
	return out
}

// TestSSEUnfinishedEventPassedOn: an event stream under a token that does
// not expire reaches the client byte for byte, an unfinished event the
// host ends with included (what the gateway holds back of it goes out
// when the host ends), and a complete event and comment lines at once,
// while the host still holds the stream open.
func TestSSEUnfinishedEventPassedOn(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	gotFirst := make(chan struct{})
	// A comment line between events (a heartbeat, sent without a blank
	// line by some hosts) is no part of an event: it goes on at once, so
	// that it keeps idle timers on the way to the client from firing.
	const first, rest = "data: one\r\n\r\n: ping\n:\r", "data: tw" + "o\n\ndata: unfinished"
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, first)
		w.(http.Flusher).Flush()
		select { // the stream stays open until the client has the first bytes
		case <-gotFirst:
		case <-time.After(5 * time.Second):
			return // they were held back: the rest never comes
		}
		for _, p := range []string{"data: tw", "o\n\ndata: unfinished"} {
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	})
	tok := e.token(nil)
	r, _ := http.NewRequest("GET", e.srv.URL+"/events", nil)
	r.Host = e.host("shop")
	r.Header.Set("Authorization", "Bearer "+tok)
	res, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, len(first))
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != first {
		t.Fatalf("first event %q, %v", buf, err)
	}
	close(gotFirst)
	if b, err := io.ReadAll(res.Body); err != nil || string(b) != rest {
		t.Fatalf("rest %q, %v; want %q", b, err, rest)
	}
}

// TestUpgradeClientHalfClosesFirst: a client that ends its side of an
// upgraded connection first (a shell's stdin closed) still gets what the
// host sends after that: the tunnel half-closes the host's side rather
// than closing both (the h1 transport's connections to hosts are wrapped
// for their heads, and the wrapper must pass CloseWrite on).
func TestUpgradeClientHalfClosesFirst(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), nil)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(brw) // up to the client's end, passed on as a half-close
		_, _ = io.WriteString(c, "after: "+string(b))
	})
	tok := e.token(func(c jwt.MapClaims) { c["sub"] = "half-first" })
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	_, _ = io.WriteString(c, "GET /half HTTP/1.1\r\nHost: shop.apps.test\r\nAuthorization: Bearer "+tok+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	_, _ = io.WriteString(c, "ping")
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(br); string(b) != "after: ping" {
		t.Fatalf("after the client's half-close the tunnel gave %q (%v), want %q", b, err, "after: ping")
	}
}
