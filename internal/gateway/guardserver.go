package gateway

import (
	"bytes"
	"context"
	"net"
	"net/http"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// net/http answers a request it fails to read (a bad Host, an invalid
// header, a head over its limit, ...) itself, before any handler: one
// write of "HTTP/1.1 <status>" with serverErrorHeaders and a text/plain
// body, then it closes the connection. DESIGN §2 wants every error the
// gateway answers as problem+json, so the guard writes a problem with the
// same status in its place. A handler's body may hold those very bytes (a
// host's echo, after a flush), even while a refused head waits behind its
// request, so the guard replaces a write only when no handler is
// answering on the connection, which GuardServer's hooks tell it.

// GuardServer prepares srv, whose HTTP/1 connections GuardListener or
// GuardTLSConn wrap, to tell each connection's guard when one of its
// handlers is answering: from the handler's start until net/http has
// written the whole answer (http.StateIdle). Only outside such an answer
// does the guard replace net/http's own error answers. It also tells the
// guard when a handler takes the connection over (http.StateHijacked, a
// WebSocket upgrade), which ends the guard's tracking. It wraps srv's
// Handler, ConnContext and ConnState, keeping what they did, and sizes the
// guard's hold on a head from srv.MaxHeaderBytes, and its bound on a
// request line from the connection's context (httpwire.WithLineLimit,
// which edge puts on its public listeners' servers); call it once, before
// srv serves. Without it the guard still refuses, but net/http's
// answers go out as net/http wrote them, and an upgraded connection stays
// tracked as HTTP.
func GuardServer(srv *http.Server) { guardServer(srv, "") }

// GuardServerOf returns GuardServer for the servers of a gateway of
// cluster id: every answer the guard writes (its refusals, its 414, and
// what it writes in place of net/http's own error answers) carries
// X-Gatehouse-Cluster, as the gateway's answers do (DESIGN §5.2).
func GuardServerOf(cluster string) func(*http.Server) {
	return func(srv *http.Server) { guardServer(srv, cluster) }
}

func guardServer(srv *http.Server, cluster string) {
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux // what net/http would serve
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 { // HTTP/2 connections are never guarded
			if g, ok := r.Context().Value(guardKey{}).(*guardConn); ok {
				g.served.Add(1)
			}
		}
		next.ServeHTTP(w, r)
	})
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if g := guardOf(c); g != nil {
			g.hooked.Store(true)
			// Before the connection's goroutine starts: it reads maxHead.
			g.f.maxHead = guardHeadLimit(srv.MaxHeaderBytes)
			g.f.maxLine = httpwire.LineLimit(ctx)
			g.f.star = srv.DisableGeneralOptionsHandler
			g.cluster = cluster
			ctx = context.WithValue(ctx, guardKey{}, g)
		}
		return ctx
	}
	connState := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateIdle:
			if g := guardOf(c); g != nil {
				served := g.served.Load()
				g.idle.Store(served)
				// net/http waits for a request now, unless the guard
				// passed it a head while the handler answered
				// (pipelined): that is the request it reads next, and
				// what the guard holds behind it is no request's start
				// but maybe the first bytes of the protocol it
				// upgrades to (a WebSocket frame begins with 0x81).
				// Read with no Read in progress: net/http ended its
				// background read before the handler's answer did.
				if g.f.heads == served {
					g.f.await.Store(true)
				}
			}
		case http.StateActive:
			// net/http has the whole head and starts the handler: what
			// comes next (a pipelined head, or an upgrade's first bytes
			// of its new protocol) waits with the guard until net/http
			// asks for it or a hijack takes it whole. Left set from the
			// idle before a pipelined request, await would pass such a
			// line on now, and net/http's background read would keep
			// its first byte from the hijacker.
			if g := guardOf(c); g != nil {
				g.f.await.Store(false)
			}
		case http.StateHijacked:
			// The one way a connection net/http serves switches
			// protocols (a 101 or a 2xx to CONNECT written through the
			// ResponseWriter leaves net/http reading requests on it).
			if g := guardOf(c); g != nil {
				g.f.hijacked.Store(true)
			}
		}
		if connState != nil {
			connState(c, st)
		}
	}
}

type guardKey struct{}

// guardOf returns the guard c is, or nil.
func guardOf(c net.Conn) *guardConn {
	switch c := c.(type) {
	case *guardConn:
		return c
	case *guardTLSConn:
		return &c.guardConn
	}
	return nil
}

// answerFor returns what to write in place of p when p is one of
// net/http's own error answers (or its 417 to an unknown Expect) and no
// handler is answering; nil otherwise. When net/http failed on the guard's stand-in (every head the
// guard passed before it has had its handler; OPTIONS *, which net/http
// answers itself unless the server has DisableGeneralOptionsHandler, is
// then counted on neither side) it is the guard's refusal,
// which names the framing refused; else a problem with net/http's status
// and reason.
//
// Every answer the guard writes carries X-Gatehouse-Cluster (when
// GuardServerOf named one): each is the gateway's own answer to a request
// that reached it, which DESIGN §5.2 says every answer names, and the
// edge's own 414 and 431 on the other paths (a head net/http read whole,
// HTTP/2) carry it too (edge.Options.Cluster).
func (c *guardConn) answerFor(p []byte) []byte {
	if !c.hooked.Load() || c.served.Load() != c.idle.Load() {
		return nil
	}
	var a []byte
	switch status, detail, ok := parseServerError(p); {
	case !ok && expectationFailed(p):
		a = expectationAnswer
	case !ok:
		return nil
	case status == http.StatusBadRequest && c.f.refused.Load() && c.served.Load() == c.f.refusedAt:
		a = refusals[c.f.why]
	default:
		a = problem.Raw(status, detail)
	}
	if c.cluster != "" {
		a = withField(a, headerCluster, c.cluster)
	}
	return a
}

// serverErrorHeaders are the fields of net/http's error answers (its
// errorHeaders), with the line ends around them.
const serverErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// bareErrors are net/http's error answers that give no reason, by
// status: the body it writes, and the detail the problem gives.
var bareErrors = map[int]struct{ body, detail string }{
	http.StatusBadRequest:                  {"400 Bad Request", "the request head is malformed"},
	http.StatusRequestHeaderFieldsTooLarge: {"431 Request Header Fields Too Large", "the request head is over the listener's limit"},
	http.StatusNotImplemented:              {"Unsupported transfer encoding", "unsupported transfer encoding"},
}

// parseServerError recognises p as one whole error answer of net/http's,
// exactly as it formats them (server.go, conn.serve): "HTTP/1.1 <status>
// <text>: <reason>", serverErrorHeaders and "<status> <text>: <reason>"
// again as the body, or one of bareErrors. It returns the status and the
// reason (for a bare one, its detail).
func parseServerError(p []byte) (status int, detail string, ok bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok {
		return 0, "", false
	}
	line, body, ok := bytes.Cut(rest, []byte(serverErrorHeaders))
	if !ok || len(line) < 5 || line[3] != ' ' {
		return 0, "", false
	}
	for _, d := range line[:3] {
		if d < '0' || d > '9' {
			return 0, "", false
		}
		status = status*10 + int(d-'0')
	}
	if status < 400 || status > 599 {
		return 0, "", false
	}
	text := http.StatusText(status)
	after, ok := bytes.CutPrefix(line[4:], []byte(text))
	if text == "" || !ok {
		return 0, "", false
	}
	if len(after) == 0 {
		bare, ok := bareErrors[status]
		if !ok || string(body) != bare.body {
			return 0, "", false
		}
		return status, bare.detail, true
	}
	reason, ok := bytes.CutPrefix(after, []byte(": "))
	if !ok || len(reason) == 0 || !bytes.Equal(body, line) {
		return 0, "", false
	}
	for _, b := range reason {
		if b < ' ' || b > '~' {
			return 0, "", false
		}
	}
	return status, string(reason), true
}

// net/http answers a request whose Expect is not 100-continue 417 itself,
// before any handler, as a response of its own rather than an error
// answer: "HTTP/1.x 417 Expectation Failed", Connection: close, its Date
// and Content-Length: 0, in one write.
const (
	expectationHead = " 417 Expectation Failed\r\nConnection: close\r\nDate: "
	expectationTail = "\r\nContent-Length: 0\r\n\r\n"
)

var expectationAnswer = problem.Raw(http.StatusExpectationFailed, "the Expect field names an expectation other than 100-continue")

// expectationFailed recognises p as net/http's 417, exactly as it writes
// it (server.go, sendExpectationFailed), for HTTP/1.1 or HTTP/1.0.
func expectationFailed(p []byte) bool {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1"))
	if !ok {
		rest, ok = bytes.CutPrefix(p, []byte("HTTP/1.0"))
	}
	if !ok {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(expectationHead)); !ok {
		return false
	}
	date, ok := bytes.CutSuffix(rest, []byte(expectationTail))
	return ok && len(date) == len(http.TimeFormat) && bytes.HasSuffix(date, []byte(" GMT"))
}
