package gateway

import (
	"bytes"
	"context"
	"net"
	"net/http"
)

// net/http answers the guard's stand-in head itself, before any handler:
// one write of "HTTP/1.1 400 Bad Request: invalid header name" in
// text/plain, then it closes the connection, and the guard writes its
// refusal in its place. A handler's body may hold those very bytes (a
// host's echo, after a flush), even while a refused head waits behind its
// request, so the guard replaces a write only when no handler is
// answering on the connection, which GuardServer's hooks tell it.

// GuardServer prepares srv, whose HTTP/1 connections GuardListener or
// GuardTLSConn wrap, to tell each connection's guard when one of its
// handlers is answering: from the handler's start until net/http has
// written the whole answer (http.StateIdle). Only outside such an answer
// does the guard replace net/http's answer to its stand-in. It wraps srv's
// Handler, ConnContext and ConnState, keeping what they did; call it once,
// before srv serves. Without it the guard still refuses, but net/http's
// answer goes out as net/http wrote it.
func GuardServer(srv *http.Server) {
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
			ctx = context.WithValue(ctx, guardKey{}, g)
		}
		return ctx
	}
	connState := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateIdle {
			if g := guardOf(c); g != nil {
				g.idle.Store(g.served.Load())
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

// answerFor returns the refusal to write in place of p, when p is
// net/http's answer to the guard's stand-in head; nil otherwise. It is
// when no handler is answering and every head the guard passed before the
// stand-in has had its handler (OPTIONS *, which net/http answers itself,
// is not counted on either side), not when net/http failed on one of
// those.
func (c *guardConn) answerFor(p []byte) []byte {
	if !c.hooked.Load() || c.served.Load() != c.idle.Load() || !c.f.refused.Load() {
		return nil
	}
	if c.served.Load() != c.f.refusedAt || !bytes.HasPrefix(p, refusalAnswer) {
		return nil
	}
	return refusals[c.f.why]
}
