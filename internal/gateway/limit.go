package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// limit is step 6: a sliding window per (app, client address), the app's
// rate_limit or the gateway default. Every response, passed or refused,
// carries the X-RateLimit-* and IETF RateLimit/RateLimit-Policy fields;
// over budget is 429 with Retry-After, and the host never sees it.
//
// Each gateway process counts on its own: with N gateways sharing a
// client's requests the effective limit is the app's limit × N.
func (g *Gateway) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		rq := route.RequestFrom(ctx)
		if rq == nil || rq.Match.Kind != route.KindApp || g.edge.apps == nil {
			next.ServeHTTP(w, r)
			return
		}
		app := rq.Match.App
		q := g.edge.appQuota(app.RateLimit)
		res, _ := g.edge.apps.Charge(limit.KeyFor(app.ID, rq.ClientIP), 1, q) // q is valid
		x := exchangeFrom(ctx)
		if !g.rateAnswer(w, x, "app", app.ID, q, res) {
			return
		}
		if x != nil {
			x.appWait = res.Reset
		}
		next.ServeHTTP(w, r)
	})
}

// limitUnknown charges a request for an unknown host to its client address
// (DESIGN §2 step 3). It reports whether the request may go on to its 404;
// on false it has answered 429 itself. The route layer calls it.
func (g *Gateway) limitUnknown(w http.ResponseWriter, r *http.Request) bool {
	if g.edge.unknown == nil {
		return true
	}
	ctx := r.Context()
	ip := peerAddr(r.RemoteAddr)
	if rq := route.RequestFrom(ctx); rq != nil && rq.ClientIP.IsValid() {
		ip = rq.ClientIP
	}
	// route runs before hygiene, so behind a trusted proxy the client is
	// still to be read from X-Forwarded-For, exactly as hygiene will.
	if g.isTrusted(ip) {
		ip = g.clientFromChain(r.Header["X-Forwarded-For"], ip)
	}
	res, _ := g.edge.unknown.Charge(limit.KeyFor("", ip), 1, g.edge.unknownQ)
	return g.rateAnswer(w, exchangeFrom(ctx), "unknown", "", g.edge.unknownQ, res)
}

// appQuota is the app's override, field by field, over the default. An
// override that cannot be enforced (the API refuses those) falls back to
// the default rather than failing the request.
func (e *edgeState) appQuota(rl route.RateLimit) limit.Quota {
	q := e.quota
	if rl.Requests > 0 {
		q.Limit = rl.Requests
	}
	if rl.Window > 0 {
		q.Window = time.Duration(rl.Window)
	}
	if q.Validate() != nil {
		return e.quota
	}
	return q
}

// rateFields are the response fields rateAnswer sets (Retry-After aside,
// which only its own 429 carries).
var rateFields = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"}

// rateAnswer writes the rate-limit fields for policy name and, when res
// refused the request, the 429. It reports whether the request may go on.
func (g *Gateway) rateAnswer(w http.ResponseWriter, x *exchange, name, app string, q limit.Quota, res limit.Result) bool {
	h := w.Header()
	setRateFields(h, x, name, q, res)
	if res.Allowed {
		return true
	}
	retry := max(limit.Seconds(res.RetryAfter), 1)
	h["Retry-After"] = []string{strconv.FormatInt(retry, 10)}
	if app == "" {
		app = metrics.AppUnknown
	}
	g.edge.limited.WithLabelValues(app, name).Inc()
	problem.Write(w, http.StatusTooManyRequests, "rate limit exceeded: retry after "+strconv.FormatInt(retry, 10)+" s")
	return false
}

// setRateFields sets the rate-limit fields (rateFields) in h to policy
// name's quota q and its state res, replacing what they held. The values
// are formatted into x's room (x may be nil) and set as canonical keys,
// so that a passing request allocates nothing here.
func setRateFields(h http.Header, x *exchange, name string, q limit.Quota, res limit.Result) {
	limitS := x.str(strconv.AppendInt(x.scratch(), int64(res.Limit), 10))
	remaining := x.str(strconv.AppendInt(x.scratch(), int64(res.Remaining), 10))
	reset := x.str(strconv.AppendInt(x.scratch(), limit.Seconds(res.Reset), 10))
	b := append(x.scratch(), '"')
	b = append(append(append(b, name...), `";q=`...), limitS...)
	b = strconv.AppendInt(append(b, ";w="...), limit.Seconds(q.Window), 10)
	policy := x.str(b)
	b = append(x.scratch(), '"')
	b = append(append(append(b, name...), `";r=`...), remaining...)
	b = append(append(b, ";t="...), reset...)
	vals := [len(rateFields)][]string{x.value(limitS), x.value(remaining), x.value(reset), x.value(policy), x.value(x.str(b))}
	for i, k := range rateFields {
		h[k] = vals[i]
	}
	if x != nil {
		// For the recorder to put back after a host's 1xx (recorder.WriteHeader).
		x.w.rate = vals
	}
}
