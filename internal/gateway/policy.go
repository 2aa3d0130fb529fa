package gateway

import (
	"net/http"

	"github.com/gatehouse-dev/gatehouse/internal/policy"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// policy is step 8: the app's ordered path rules, first match wins,
// default allow, evaluated on every cleaned reading of the path as sent
// (internal/policy) so that no encoding walks around a deny. A denied
// request gets 403 and is counted in gatehouse_policy_denied_total.
func (g *Gateway) policy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		if rq == nil || rq.Match.Kind != route.KindApp || len(rq.Match.App.Policy) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if !allowedByPolicy(rq.Match.App.Policy, r) {
			if g.edge.denied != nil {
				g.edge.denied.WithLabelValues(rq.Match.App.ID).Inc()
			}
			problem.Write(w, http.StatusForbidden, "this app's policy does not allow "+r.Method+" on this path")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedByPolicy converts the app's rules (same shape) and checks r's
// escaped path, the bytes the host will receive.
func allowedByPolicy(rules []route.PolicyRule, r *http.Request) bool {
	var buf [16]policy.Rule
	pr := buf[:0]
	for _, x := range rules {
		pr = append(pr, policy.Rule(x))
	}
	ok, _ := policy.Check(pr, r.Method, r.URL.EscapedPath())
	return ok
}
