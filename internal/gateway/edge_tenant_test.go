package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestClaimLimitsPerIssuer: a sub is unique only within its issuer (RFC
// 7519 §4.1.2), so two tenants' issuers may both mint sub "user1". Their
// claim budgets must stay apart, or one tenant exhausts the other's; two
// tokens of the same issuer and sub still share one.
func TestClaimLimitsPerIssuer(t *testing.T) {
	_, keyB, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		limit string
		// exhaust spends A's budget and returns a func that gives back
		// what it holds (nil when it holds nothing).
		exhaust func(t *testing.T, e *edgeEnv, tokA string) (done func())
	}{
		{"rps", func(t *testing.T, e *edgeEnv, tokA string) func() {
			if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tokA)}); res.StatusCode != 200 {
				t.Fatalf("issuer A's first request: %d %s", res.StatusCode, body)
			}
			return nil
		}},
		{"connections", func(t *testing.T, e *edgeEnv, tokA string) func() {
			release := make(chan struct{})
			e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					<-release
				}
				_, _ = w.Write([]byte("ok"))
			})
			before := e.backendOf("shop").count()
			held := make(chan int, 1)
			go func() {
				res, _ := e.do(edgeReq{app: "shop", path: "/hold", hdr: edgeBearer(tokA)})
				held <- res.StatusCode
			}()
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.backendOf("shop").count() > before }, "issuer A's held request never arrived")
			return func() {
				close(release)
				if code := <-held; code != 200 {
					t.Errorf("issuer A's held request: %d", code)
				}
			}
		}},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			e := newEdgeEnv(t, "apps.test", authApps(), func(o *Options) {
				o.Edge.Auth.Issuers = append(o.Edge.Auth.Issuers, auth.Issuer{Name: "idp-b", Keys: []ed25519.PublicKey{keyB.Public().(ed25519.PublicKey)}})
			})
			claims := func(scope string) func(jwt.MapClaims) {
				return func(c jwt.MapClaims) {
					c["sub"], c["scope"] = "user1", scope // scope only makes the tokens differ
					c["limits"] = map[string]int{tc.limit: 1}
				}
			}
			tokA := e.token(claims("read"))
			tokA2 := e.token(claims("write")) // same issuer, same sub, another token
			tokB := edgeSign(t, keyB, func(c jwt.MapClaims) { claims("read")(c); c["iss"] = "idp-b" })

			if done := tc.exhaust(t, e, tokA); done != nil {
				defer done()
			}
			res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tokA2)})
			edgeProblem(t, res, body, http.StatusTooManyRequests) // same (iss, sub): one budget
			if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tokB)}); res.StatusCode != 200 {
				t.Fatalf("issuer B's user1 refused after issuer A's user1 spent its %s: %d %s", tc.limit, res.StatusCode, body)
			}
			if got := edgeCounter(t, e.reg, "gatehouse_rate_limited_total", map[string]string{"app": "shop", "limit": tc.limit}); got != 1 {
				t.Fatalf("rate_limited_total{%s} = %v, want 1", tc.limit, got)
			}
		})
	}
}

// TestClaimConnectionsAfterEviction: the subject population is bounded
// (auth.max_subjects), and a flood of other subjects may evict one with a
// request in flight; it then starts again with a fresh budget. The request
// held under the evicted budget must give back its slot to that budget
// alone: ending it must not free the slot of a request admitted under the
// fresh one, or a subject with connections 1 gets two at once, then more.
func TestClaimConnectionsAfterEviction(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", authApps(), func(o *Options) { o.Edge.Auth.MaxSubjects = 1 }) // one per shard
	releases := map[string]chan struct{}{"/hold1": make(chan struct{}), "/hold2": make(chan struct{})}
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ch, ok := releases[r.URL.Path]; ok {
			<-ch
		}
		_, _ = w.Write([]byte("ok"))
	})
	alice := limit.Subject{Issuer: "idp", Sub: "alice"}
	tok := e.token(func(c jwt.MapClaims) { c["limits"] = map[string]int{"connections": 1} })
	hold := func(path string) chan int {
		done := make(chan int, 1)
		go func() {
			res, _ := e.do(edgeReq{app: "shop", path: path, hdr: edgeBearer(tok)})
			done <- res.StatusCode
		}()
		testutil.WaitFor(t, 5*time.Second, func() bool { return e.gw.edge.subjects.Active(alice) == 1 }, path+" never arrived")
		return done
	}
	first := hold("/hold1")
	// Other subjects until one lands in alice's shard and evicts her
	// (32 shards: 2,000 subjects miss it with probability 1e-28).
	for i := 0; e.gw.edge.subjects.Active(alice) != 0; i++ {
		if i == 2000 {
			t.Fatal("alice was never evicted")
		}
		other := e.token(func(c jwt.MapClaims) { c["sub"] = fmt.Sprint("other-", i); c["limits"] = map[string]int{"rps": 100} })
		hdr := edgeBearer(other)
		hdr.Set("X-Forwarded-For", fmt.Sprintf("10.0.%d.%d", i/256, i%256)) // the app's own limit is per client
		if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: hdr}); res.StatusCode != 200 {
			t.Fatalf("subject other-%d: %d %s", i, res.StatusCode, body)
		}
	}
	second := hold("/hold2") // the fresh budget's one connection
	close(releases["/hold1"])
	if code := <-first; code != 200 {
		t.Fatalf("first held request: %d", code)
	}
	res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)})
	close(releases["/hold2"])
	if code := <-second; code != 200 {
		t.Fatalf("second held request: %d", code)
	}
	edgeProblem(t, res, body, http.StatusTooManyRequests)
}
