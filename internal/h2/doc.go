// Package h2 is an HTTP/2 server built for a proxy's common case: it owns
// the HTTP/2 connections the https listener negotiates by ALPN and runs
// each request's handler, the same http.Handler net/http would run.
//
// Why: net/http's HTTP/2 server costs an edge gateway ~3× nginx's CPU for a
// small proxied request (BENCHMARKS.md). Three of its design choices are
// most of that, and a proxy needs none of them:
//   - Every frame goes through a serve loop goroutine and is written by a
//     goroutine of its own, so a request crosses four goroutines.
//   - A response's HEADERS frame is written and flushed before its
//     handler may queue the DATA (the handler's header map is not the
//     server's), so a small response is two writes.
//   - Each stream runs on a new goroutine, which grows its stack through
//     the whole handler chain every time.
//
// Here the connection's goroutine reads frames and does nothing else but
// answer control frames, with one exception: on a connection whose
// requests come one at a time (as most of a proxy's clients send them), a
// bodiless request that is its only open stream runs its handler on the
// reading goroutine itself, saving the hand-over to another (~4 % of an
// HTTP/2 request's CPU in the load harness). Nothing reads the connection
// while it runs, so the reading moves on to a reused goroutine when the
// handler must wait for flow-control window, when a watcher's look at the
// socket (every 5 ms) finds that the client sent something, and after 20
// ms regardless: another stream, a reset or a PING waits about 5 ms at
// most, 20 where crypto/tls has read it already (inline.go). Other
// handlers run on reused goroutines (package workers). Handlers write
// their own frames under the connection's write lock:
// a small response is HEADERS and DATA in one write, flushed when the
// handler returns. The response's header fields are taken from the
// handler's map at WriteHeader (strings only: nothing of the map is used
// after) and encoded as the block goes out, under the write lock, with
// the connection's HPACK dynamic table: a field repeated from an earlier
// response on the connection is an index of a byte or two (hpack.go).
//
// A stream's header maps (the request's and the response's) and its
// response buffers are cleared and reused by later streams once its
// handler has returned and its frames are written, so a handler must not
// use r.Header after it returns, as net/http would allow (Options.Handler).
// The stream itself (its Request, writer and body) is reused, for the
// connection's next request, only when the handler's maker reports that
// nothing the handler left behind can reach it (Options.RequestDone) and
// it had no body; otherwise a goroutine a handler left behind reaches
// only its own stream, marked done.
//
// Control frames the reading goroutine must send (SETTINGS and PING
// acknowledgements, WINDOW_UPDATE, RST_STREAM) are queued and sent by
// whoever holds the write lock, so a handler blocked writing to a client
// that does not read never stops the connection from reading, and the
// queue is bounded: past it, the reader waits for the lock
// (backpressure, not memory).
//
// What it enforces (RFC 9113): the preface and SETTINGS first; odd,
// increasing stream ids; SETTINGS_MAX_CONCURRENT_STREAMS (running
// handlers count until they return, so resetting streams frees no slot:
// the rapid reset attack meets REFUSED_STREAM and then GOAWAY); flow
// control both ways (a stream whose client keeps its window shut longer
// than WriteStall is reset); malformed requests (pseudo-header fields,
// connection-specific fields, a content-length that disagrees with the
// DATA, a host field other than the :authority, an authority no Host
// may be) reset or refused before a handler runs; header lists over
// MaxHeaderBytes answered 431 on their stream, the connection going on
// (headers.go); and floods of frames that make no request progress
// (empty DATA, SETTINGS, PING, header blocks refused, resets of closed
// streams, DATA on a stream closed to the client past the window it had,
// WINDOW_UPDATEs past ten for each DATA frame sent and a hundred more,
// PINGs past two for each and a hundred more)
// bounded. What a client had in flight on a stream the server ended or
// refused before the client ended it (its DATA within the window, up to
// the connection's window on all such streams together; its trailers) is
// ignored (RFC 9113 §5.1), not a connection error; DATA or HEADERS on a
// stream both sides ended is one (STREAM_CLOSED). A connection that
// ends after its GOAWAY (a connection error's, the last frame written; a
// drain's; the idle timeout's) ends the server's side first
// (close_notify, FIN), and what the client still sends is read and
// dropped for up to a second (4 MiB) before the close, so that the
// client reads the GOAWAY and the last response whole, not a reset;
// Close, or the end of Shutdown's context, cuts that short. It does not push, and does not take
// extended CONNECT.
package h2
