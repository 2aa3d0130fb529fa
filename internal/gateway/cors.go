package gateway

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gatehouse-dev/gatehouse/internal/cors"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// cors is step 5. A preflight (OPTIONS with Access-Control-Request-Method)
// is answered here, 204 for an allowed origin and 403 otherwise, and never
// goes further: the host never sees one. Any other request goes on, and its
// response carries Access-Control-Allow-Origin only when it came from an
// origin on the app's list, and Vary: Origin whenever the app has a list
// (the answer depends on Origin then); whatever Access-Control-Allow-*
// fields the host set are replaced, so the gateway's list is the only one
// (cors.Policy.Respond).
func (g *Gateway) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		if rq == nil || rq.Match.Kind != route.KindApp {
			next.ServeHTTP(w, r)
			return
		}
		p := corsPolicy(rq.Match.App.CORS)
		if cors.IsPreflight(r) {
			if p.Preflight(r, w.Header()) != http.StatusNoContent {
				problem.Write(w, http.StatusForbidden, "this origin may not call this app")
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		origin := requestOrigin(r)
		// Without an Origin too: Respond allows nothing for "", but still
		// removes the host's own CORS headers, since a cache may hand this
		// response to a cross-origin request later.
		next.ServeHTTP(newCORSWriter(exchangeFrom(r.Context()), w, p, origin), r)
	})
}

// requestOrigin is r's Origin, the first if several ("" if none), read
// without canonicalizing the name again.
func requestOrigin(r *http.Request) string {
	if v := r.Header["Origin"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// newCORSWriter returns a corsWriter over w, in x's room when there is an
// exchange (x nil: a layer tested alone), so that wrapping allocates nothing.
func newCORSWriter(x *exchange, w http.ResponseWriter, p cors.Policy, origin string) *corsWriter {
	if x == nil {
		return &corsWriter{ResponseWriter: w, p: p, origin: origin}
	}
	x.cors = corsWriter{ResponseWriter: w, p: p, origin: origin}
	return &x.cors
}

func corsPolicy(c route.CORS) cors.Policy {
	return cors.Policy{Origins: c.Origins, AllowCredentials: c.AllowCredentials, AllowHeaders: c.AllowHeaders}
}

// corsWriter applies the CORS response headers when the final status is
// written, whoever writes it (the host's response or a layer's problem).
type corsWriter struct {
	http.ResponseWriter
	p      cors.Policy
	origin string
	done   bool
}

func (w *corsWriter) WriteHeader(code int) {
	if !w.done && code >= 200 {
		w.done = true
		w.p.Respond(w.origin, w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *corsWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// FlushError flushes (Server-Sent Events), writing the header first.
func (w *corsWriter) FlushError() error {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (w *corsWriter) Flush() { _ = w.FlushError() }

// Hijack hands the connection over (WebSocket); CORS does not apply.
func (w *corsWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *corsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
