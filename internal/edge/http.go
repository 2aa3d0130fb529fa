package edge

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/logcut"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

const acmePrefix = "/.well-known/acme-challenge/"

// httpHandler is the http listener: ACME challenges first, then the mode.
func (e *Edge) httpHandler() http.Handler {
	acme := http.Handler(notFound)
	if e.opts.ACME != nil {
		acme = e.opts.ACME(notFound)
	}
	var rest http.Handler
	switch e.opts.HTTPMode {
	case ModeServe:
		rest = e.opts.Handler
	case ModeACMEOnly:
		rest = notFound
	default:
		rest = http.HandlerFunc(e.redirect)
	}
	serve := e.opts.HTTPMode == ModeServe
	allow := httpAllow
	if e.opts.HTTPMode == ModeACMEOnly {
		allow = acmeOnlyAllow
	}
	return e.limits(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		challenge := strings.HasPrefix(r.URL.Path, acmePrefix)
		if challenge || !serve {
			// No chain behind these answers names the cluster, and
			// every answer does (DESIGN §5.2).
			e.stampCluster(w.Header())
		}
		switch {
		case challenge:
			acme.ServeHTTP(w, r)
		case !serve && r.URL.Path == "*":
			asterisk(w, r, allow)
		case !serve && r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && e.opts.Handler != nil:
			// The L7 chain's first layer answers it, on any host (DESIGN
			// §2 step 1; 503 while the gateway starts): a load balancer
			// that checks port 80 gets what it gets on https, not a 308
			// it may count as down, or a 404.
			e.opts.Handler.ServeHTTP(w, r)
		default:
			rest.ServeHTTP(w, r)
		}
	}))
}

// The Allow of "OPTIONS *" on the http listener: in redirect mode every
// method is answered (308), in acme-only only ACME's GET; and on the
// management listener, the methods of its routes.
var (
	httpAllow       = []string{"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"}
	acmeOnlyAllow   = []string{"GET, HEAD, OPTIONS"}
	managementAllow = []string{"GET, HEAD, POST, PUT, DELETE, OPTIONS"}
)

// asterisk answers a request whose target is "*" (the asterisk form) on
// a listener with no chain behind it (the http listener in redirect or
// acme-only mode, the management listener): "OPTIONS *" asks about the
// server, not a resource (RFC 9110 §9.3.7), and gets 200 with Allow and
// no body; any other method may not use the form, 400. net/http would
// answer the OPTIONS itself (Server's general OPTIONS handler) before
// any layer here, so without X-Gatehouse-Cluster; the servers leave it
// to the handler (DisableGeneralOptionsHandler). On a listener that
// serves apps the chain answers it (gateway's asterisk).
func asterisk(w http.ResponseWriter, r *http.Request, allow []string) {
	if r.Method != http.MethodOptions {
		problem.Write(w, http.StatusBadRequest, "the request target * is for OPTIONS only")
		return
	}
	h := w.Header()
	h["Allow"] = allow
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// notFound is the http listener's own 404: an ACME token no gateway
// holds, and everything in acme-only mode.
var notFound = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	problem.Write(w, http.StatusNotFound, "not found on the http listener")
})

// redirect answers 308 to the same host, path and query over https. A
// request in asterisk form ("*") has no path to send anywhere: it is
// answered before (asterisk).
func (e *Edge) redirect(w http.ResponseWriter, r *http.Request) {
	host, ok := route.NormalizeHost(r.Host)
	if !ok {
		host, ok = ipLiteral(r.Host)
	}
	if !ok {
		problem.Write(w, http.StatusBadRequest, "the Host is not a valid host name")
		return
	}
	if p := e.httpsPort(); p != 0 && p != 443 {
		host = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(p))
	}
	target := "https://" + host + r.URL.RequestURI()
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusPermanentRedirect)
}

// ipLiteral returns h's IP address (its port dropped) as it goes in a
// URL: an IPv6 one in brackets, which NormalizeHost refuses as a name.
// A port that is not digits makes h malformed, as it does a name.
func ipLiteral(h string) (string, bool) {
	if route.BadPort(h) {
		return "", false
	}
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if err != nil || a.Zone() != "" {
		return "", false
	}
	if a.Is6() {
		return "[" + a.String() + "]", true
	}
	return a.String(), true
}

// limits answers 414 for a request line over MaxRequestLine. (The header
// block limit, 431, is http.Server's MaxHeaderBytes.) Like every error the
// gateway answers itself, it is a problem+json body (DESIGN §2).
func (e *Edge) limits(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.lineOver(r) {
			e.lineTooLong(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// lineOver reports whether r's request line is over MaxRequestLine.
func (e *Edge) lineOver(r *http.Request) bool {
	return len(r.Method)+len(r.RequestURI)+len(r.Proto)+2 > e.opts.MaxRequestLine
}

func (e *Edge) lineTooLong(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Connection", "close")
	e.stampCluster(h)
	problem.Write(w, http.StatusRequestURITooLong, "the request line is over the listener's limit")
}

// headTooLarge answers 431 for a head over MaxHeaderBytes.
func (e *Edge) headTooLarge(w http.ResponseWriter) {
	e.stampCluster(w.Header())
	problem.Write(w, http.StatusRequestHeaderFieldsTooLarge, "the request head is over the listener's limit")
}

// stampCluster names the cluster on an answer edge writes itself, as the
// gateway's own answers do (DESIGN §5.2: every response carries it).
func (e *Edge) stampCluster(h http.Header) {
	if e.clusterHdr != nil {
		h["X-Gatehouse-Cluster"] = e.clusterHdr
	}
}

// headerLimit answers 431 for an HTTP/1 head (request line and header
// block) over MaxHeaderBytes. net/http reads up to MaxHeaderBytes plus
// 4 KiB (its read buffer's slack) before it answers 431 itself, so the
// head it parsed is measured again here, as it came on the wire but for
// optional white space. HTTP/2 bounds its header list itself. On a
// listener that bounds the request line (lineLimit), a head over both
// limits gets the request line's 414: the line is what the client must
// shorten, and a line too long for any head would get it too.
func (e *Edge) headerLimit(next http.Handler, lineLimit bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && headBytes(r) > e.opts.MaxHeaderBytes {
			if lineLimit && e.lineOver(r) {
				e.lineTooLong(w)
				return
			}
			w.Header().Set("Connection", "close")
			e.headTooLarge(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headBytes is the size of r's head: "METHOD target PROTO\r\n", one
// "Name: value\r\n" per field (Host included, which net/http moves to
// r.Host), and the blank line.
func headBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2 + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// readyz is the management listener's /readyz: 200 when serving and
// ready, 503 while starting or draining (a delayed drain too: Linger);
// the open connection count is the drain signal.
func (e *Edge) readyz(w http.ResponseWriter, r *http.Request) {
	status, code := "ready", http.StatusOK
	switch {
	case e.draining.Load() || e.lingering.Load():
		status, code = "draining", http.StatusServiceUnavailable
	case !e.serving.Load() || (e.opts.Ready != nil && !e.opts.Ready()):
		status, code = "starting", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(struct {
		Status            string `json:"status"`
		ActiveConnections int64  `json:"active_connections"`
	}{status, e.conns.count()})
}

func (e *Edge) managementHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", e.readyz)
	mux.HandleFunc("/readyz", problem.GetOnly) // not Management's 404
	if e.opts.Management != nil {
		mux.Handle("/", e.opts.Management)
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "*":
			asterisk(w, r, managementAllow) // ServeMux would answer 400
		case r.URL.Path != "/readyz" && e.opts.Management != nil:
			// As sent: ServeMux redirects a path with "." or ".." segments
			// to the path cleaned, which under the control API names
			// another item (records/./.. is the zone) that a client
			// following the redirect would then write to. Management
			// routes (and refuses) such paths itself.
			e.opts.Management.ServeHTTP(w, r)
		default:
			mux.ServeHTTP(w, r)
		}
	})
	if a, ok := e.mgmtLn.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		h = loopbackHosts(h)
	}
	if e.clusterHdr != nil {
		// Every answer names the cluster that gave it (DESIGN §5.2), the
		// management listener's too: an operator behind a load balancer
		// over several clusters reads which one answered /readyz.
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.stampCluster(w.Header())
			inner.ServeHTTP(w, r)
		})
	}
	return e.recoverPanics(h)
}

// recoverPanics answers a request whose handler panicked 500 problem+json
// and closes its connection, and logs the panic as an error with its
// stack, as the L7 path's observe does (DESIGN §2 step 2). The management
// listener's routes (the control API, /metrics, the dashboard) run
// outside that path, and net/http's own recovery would cut the connection
// with no answer and log the panic only through its ErrorLog, at debug:
// at the default level a failing control call left no trace. A panic
// after the answer began cuts it (logged the same); http.ErrAbortHandler,
// a deliberate abort, is cut quietly.
func (e *Edge) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &panicWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v != http.ErrAbortHandler {
				e.log.Error("edge: panic serving a management request", "method", logcut.Method(r.Method), "path", logcut.Path(r.URL.Path),
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			if v == http.ErrAbortHandler || pw.wrote {
				panic(http.ErrAbortHandler) // net/http cuts the connection, quietly
			}
			h := w.Header()
			clear(h)
			h.Set("Connection", "close")
			e.stampCluster(h)
			problem.Write(w, http.StatusInternalServerError, "the gateway failed to handle this request")
		}()
		next.ServeHTTP(pw, r)
	})
}

// panicWriter records whether the answer began, for recoverPanics.
type panicWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *panicWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *panicWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for code that type-asserts it.
func (w *panicWriter) Flush() {
	w.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *panicWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// loopbackHosts guards a listener bound to loopback against DNS
// rebinding: a web page the operator opens can make the browser send
// requests here under a name of the page's that it re-points at
// 127.0.0.1, and read /metrics, /readyz and the API's public routes. That
// browser sends the page's name in Host, so only localhost or a loopback
// address is answered, and anything else gets 421. /healthz answers any
// Host, as on the public listeners (DESIGN §2), and tells nothing. A
// listener bound elsewhere is left alone: scrapers reach it by name.
func loopbackHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && !loopbackHost(r.Host) {
			problem.Write(w, http.StatusMisdirectedRequest,
				"this listener is bound to loopback and answers Host localhost or a loopback address only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether host (a Host header, port optional) is
// localhost or a loopback IP literal. An empty Host is let through: a
// browser always sends one, so it is no rebinding.
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = strings.TrimSuffix(host, ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
