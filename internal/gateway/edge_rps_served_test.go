package gateway

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestClaimRefusalFieldsServed: through the real servers (the lane and
// net/http alone for HTTP/1.1, h2 for HTTP/2), on one kept-alive
// connection each, a 429 over the token's rps carries the token's fields,
// and the requests after it on that connection carry the app's again,
// exactly and once each, also when the host sent a 103 first (the fields
// the recorder puts back); a 429 over connections keeps the app's fields
// (DESIGN §6).
func TestClaimRefusalFieldsServed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		disableLane bool
		scheme      string // http: the plaintext listener; https: TLS
		h2          bool
	}{
		{"http/1.1, lane", false, "http", false},
		{"http/1.1, net/http", true, "http", false},
		{"http/1.1 over TLS, lane", false, "https", false},
		{"h2", false, "https", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEdgeEnv(t, testZone, authApps(), nil)
			release := make(chan struct{})
			e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/hints":
					w.Header().Set("Link", "</a.css>; rel=preload")
					w.WriteHeader(http.StatusEarlyHints)
				case "/hold":
					<-release
				}
				_, _ = io.WriteString(w, "ok")
			})
			httpAddr, httpsAddr := (&env{t: t, gw: e.gw}).serve(tc.disableLane)
			addr := httpAddr
			if tc.scheme == "https" {
				addr = httpsAddr
			}
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: tc.h2, MaxIdleConnsPerHost: 1}
			if !tc.h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			t.Cleanup(tr.CloseIdleConnections)
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			var conns atomic.Int32
			do := func(path, tok string, reuse bool) *http.Response {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, tc.scheme+"://"+addr+path, nil)
				req.Host = "shop." + testZone
				req.Header.Set("Authorization", "Bearer "+tok)
				if reuse {
					req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
						if !i.Reused {
							conns.Add(1)
						}
					}}))
				}
				res, err := cl.Do(req)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if (res.ProtoMajor == 2) != tc.h2 {
					t.Fatalf("GET %s over %s", path, res.Proto)
				}
				return res
			}
			fields := func(what string, res *http.Response, status int, want map[string]string) {
				t.Helper()
				if res.StatusCode != status {
					t.Fatalf("%s: %d, want %d", what, res.StatusCode, status)
				}
				for k, v := range want {
					got := res.Header.Values(k)
					if v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
						t.Errorf("%s: %s %q, want %q", what, k, got, v)
					}
				}
			}
			app := func(left int) map[string]string {
				l := strconv.Itoa(left)
				return map[string]string{"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": l, "X-RateLimit-Reset": "0",
					"RateLimit-Policy": `"app";q=600;w=60`, "RateLimit": `"app";r=` + l + ";t=0", "Retry-After": ""}
			}
			rps := map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
				"RateLimit-Policy": `"rps";q=1;w=1`, "RateLimit": `"rps";r=0;t=1`, "Retry-After": "1"}

			tok := e.token(func(c jwt.MapClaims) { c["sub"] = "bursty"; c["limits"] = map[string]int{"rps": 1} })
			fields("first", do("/", tok, true), 200, app(599))
			fields("over rps", do("/", tok, true), 429, rps)
			e.advance(time.Second)
			fields("after the 429", do("/", tok, true), 200, app(597))
			fields("over rps again", do("/", tok, true), 429, rps)
			e.advance(time.Second)
			fields("a 103 after the 429", do("/hints", tok, true), 200, app(595))
			if n := conns.Load(); n != 1 {
				t.Fatalf("%d connections, want the requests on one", n)
			}

			// Over connections (with rps to spare): the app's fields.
			conn := e.token(func(c jwt.MapClaims) {
				c["sub"] = "conn-user"
				c["limits"] = map[string]int{"rps": 100, "connections": 1}
			})
			held := make(chan int, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodGet, tc.scheme+"://"+addr+"/hold", nil)
				req.Host = "shop." + testZone
				req.Header.Set("Authorization", "Bearer "+conn)
				res, err := cl.Do(req)
				if err != nil {
					held <- 0
					return
				}
				res.Body.Close()
				held <- res.StatusCode
			}()
			testutil.WaitFor(t, 5*time.Second, func() bool {
				return e.gw.edge.subjects.Active(limit.Subject{Issuer: "idp", Sub: "conn-user"}) == 1
			}, "the held request never arrived")
			over := app(593)
			over["Retry-After"] = "1"
			fields("over connections", do("/", conn, false), 429, over)
			close(release)
			if code := <-held; code != 200 {
				t.Fatalf("held request: %d", code)
			}
			e.advance(time.Second)
			fields(fmt.Sprintf("after the connections 429 (%s)", tc.name), do("/", tok, false), 200, app(592))
		})
	}
}
