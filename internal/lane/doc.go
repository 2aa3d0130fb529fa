// Package lane is a lean HTTP/1.1 server for the requests that make up
// most of an edge gateway's traffic: plain requests on a keep-alive
// connection. It reads and serves them itself, through the same
// http.Handler net/http would run, and hands a connection to net/http —
// with every byte it has read — at the first request it does not take.
//
// Why: net/http's server spends several times the gateway's own CPU on a
// small proxied request (a background read and context per request, a
// textproto header parse, a sorted header write, a chunking writer). The
// lane parses the head in place, reuses its maps and buffers across a
// connection's requests, and writes the response head once. A response
// goes out through a 4 KiB buffer, but a body write that overflows it
// leaves together with what is held (the head), in one write of up to
// 32 KiB through a buffer borrowed for that call (see out): each write is
// a segment the client must wake for.
//
// What it takes: HTTP/1.1; GET, HEAD, POST, PUT, PATCH, DELETE or
// OPTIONS; an origin-form target, or "OPTIONS *" where net/http would
// give it to the handler too (Server.DisableGeneralOptionsHandler);
// exactly one valid Host; no body or one Content-Length (digits only),
// never Transfer-Encoding; no Upgrade, Expect or TE; Connection naming
// only keep-alive or close; header names that are tokens and values
// without control bytes; and a head that fits in MaxHeaderBytes (at most
// 4 KiB). Everything else — a chunked body, a
// WebSocket upgrade, 100-continue, HTTP/1.0, a malformed or oversized
// head — goes to net/http,
// which answers exactly as it would have had it read the connection from
// the start (its 400, 414, 431 and 501 included). The handler cannot tell
// the two servers apart: the *http.Request it gets carries the same
// fields, its body reads the same bytes (an unread rest up to 256 KiB is
// dropped so the connection goes on, as the response's head is written or,
// once the handler has asked for full duplex, after it returned; more
// closes it, after a half-close that lets the response arrive), and the
// response on the wire has the
// same status, headers (in map order rather than sorted), framing and
// Date.
//
// The edge runs one lane on the plaintext listener (serve mode) and one
// for HTTP/1.1 over TLS (h2 connections go to net/http at the handshake).
// A TLS connection handed over is no longer a *tls.Conn to net/http; it
// still reports its ConnectionState, from which the edge restores r.TLS.
//
// An idle plaintext connection holds no goroutine: on Linux the lane puts
// its socket in an epoll set of its own and one goroutine, started with the
// first idle connection and ended by Close, resumes a connection (on a
// reused goroutine, package workers) when its
// next request (or its end) arrives, and closes those idle past
// IdleTimeout. A connection goes there only once it has been idle for a
// short while (warmFor, a quarter second) on a goroutine: a client that
// comes back sooner is served from the runtime's netpoller, which wakes a
// waiting goroutine for less than the set's system calls and a new
// goroutine cost (~10 % more CPU for a connection that makes two
// requests, measured with every first wait parked at once). TLS
// connections wait on a goroutine, as crypto/tls may hold a record it has
// read.
//
// On a plaintext keep-alive connection after its first request, the last
// write of a bodiless request's response is made by the read that waits
// for the next request (sock.Conn's Hold, see holder): the read then
// waits for readiness without first trying, which would find nothing,
// since a client sends its next request only once it has the answer. It
// saves a system call per request (~3 % of a small proxied request's CPU
// on the load harness's machine). A client that pipelines gets no such
// replies once seen to pipeline; before that, a request it sent ahead of
// its answer can wait for the end of the warm wait (see replier).
//
// A client that leaves mid-request cancels the request's context, as with
// net/http, but not at once: the lane starts reading the connection in the
// background only once a bodiless request has run for half a second
// (net/http starts a background read for every request; most end long
// before). A request with a body is read by its handler, which sees the
// client leave as a read error while the body comes; once the body has
// been read to its end the watch starts as for a bodiless request (as
// net/http's background read starts at the body's EOF), so a POST that
// opens a long stream is canceled when its client leaves too.
package lane
