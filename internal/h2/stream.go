package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// stream is one request and its response. A handler that leaves a
// goroutine behind holding its writer or body must reach this request's,
// marked done, never a later one's: so a stream is reused, for the
// connection's next request, only when the handler's maker says nothing
// it left can reach the request (Options.RequestDone) and the stream had
// no body; otherwise a new one is made. Its header maps and response
// buffers are reused in any case (recycle).
type stream struct {
	cn   *conn
	id   uint32
	req  *http.Request // &reqv
	reqv http.Request
	w    responseWriter
	// run is the handler that serves it: the server's, or an answer the
	// server gives itself (431, 400).
	run    http.Handler
	cancel context.CancelCauseFunc

	// Guarded by cn.mu.
	sendWin     int64
	recvWin     int64
	recvUnacked int64
	declLen     int64 // the request's content-length; -1: none
	gotLen      int64
	remoteDone  bool // END_STREAM received, or the stream is reset
	queued      bool // in cn.connWaiters
	released    bool // no longer counted in cn.active
	reset       bool // RST_STREAM sent or received
	peerReset   bool // the client reset it: to the client it is closed
	peerDone    bool // the client sent END_STREAM or RST_STREAM: nothing more comes on it
	resetErr    error
	trailer     http.Header // the trailers received, if r.Trailer declared any

	wait chan struct{} // a window grew, or the stream ended; cap 1; made by take
	body *reqBody      // nil without a body
	// header is the request's header map as the server made it (the
	// handler may swap r.Header), given back by recycle.
	header http.Header
	// vals backs the request's header values when they fit: a browser's
	// dozen fields, in the stream's allocation.
	vals [16]string
	url  url.URL // the request's URL, when a plain path (parseRequestURI)
}

// wake tells a writer waiting for window to look again; it never blocks.
// Callers hold cn.mu, under which take makes the channel when it first
// waits (most streams never do): a wake before that finds none, and
// take, looking under the same lock, sees what the waker changed.
func (st *stream) wake() {
	select {
	case st.wait <- struct{}{}:
	default:
	}
}

// abort ends the stream from the outside (reset, connection closed): its
// writes and body reads fail with err, and its context is cancelled.
func (st *stream) abort(err error) {
	st.cn.mu.Lock()
	if st.reset {
		st.cn.mu.Unlock()
		return
	}
	st.reset, st.resetErr, st.remoteDone = true, err, true
	st.wake()
	st.cn.mu.Unlock()
	if st.body != nil {
		st.body.fail(err)
	}
	st.cancel(err)
}

// resetStream aborts st and sends RST_STREAM with code.
func (cn *conn) resetStream(st *stream, code http2.ErrCode, err error) {
	st.abort(err)
	id := st.id
	cn.sendControl(func(w *http2.Framer) error { return w.WriteRSTStream(id, code) })
}

func (cn *conn) rst(id uint32, code http2.ErrCode) {
	cn.sendControl(func(w *http2.Framer) error { return w.WriteRSTStream(id, code) })
}

func (cn *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 != 1 {
		return cn.fail(http2.ErrCodeProtocol, "HEADERS on an even stream id")
	}
	cn.mu.Lock()
	st := cn.streams[id]
	if st != nil && !st.peerReset {
		cn.mu.Unlock()
		return cn.onTrailers(st, f)
	}
	if id <= cn.lastID {
		// A stream the client closed (RFC 9113 §5.1): after its
		// RST_STREAM (its handler may run on), a stream error; after
		// its END_STREAM, ours having gone too (the stream is dropped),
		// a connection error; both STREAM_CLOSED.
		reset, closed := st != nil, st != nil
		if !closed {
			reset, closed = cn.closedLocked(id)
		}
		if closed {
			cn.mu.Unlock()
			if !reset {
				return cn.fail(http2.ErrCodeStreamClosed, "HEADERS on a closed stream")
			}
			cn.rst(id, http2.ErrCodeStreamClosed)
			return cn.emptyFrame()
		}
		if f.StreamEnded() && cn.closedHeads > 0 {
			// Trailers in flight on a stream the server ended or
			// refused before the client did: ignored, as its DATA is
			// (RFC 9113 §5.1), the block decoded all the same.
			cn.closedHeads--
			cn.mu.Unlock()
			return cn.emptyFrame()
		}
		// A lower id never opened (RFC 9113 §5.1.1), or a stream closed
		// too long ago to tell: PROTOCOL_ERROR, as net/http.
		cn.mu.Unlock()
		return cn.fail(http2.ErrCodeProtocol, "HEADERS on a closed stream")
	}
	cn.lastID = id
	// Refused, the stream's DATA in flight is within the window, and its
	// trailers may follow: banked in closedWin and closedHeads before the
	// refusal goes out, lest it be followed by RST_STREAMs for the body
	// the client had begun to send, or a GOAWAY for its trailers. Heads
	// are counted now, and a stream served takes its one back; the window
	// is banked only on the refusals, as the bank has a cap
	// (bankClosedLocked) that would make taking it back lose some.
	var body int64
	if !f.StreamEnded() {
		body = streamWindow
		cn.closedHeads++
	}
	if cn.goaway {
		cn.bankClosedLocked(body)
		cn.mu.Unlock()
		cn.rst(id, http2.ErrCodeRefusedStream) // the client may retry it elsewhere
		return cn.emptyFrame()                 // a burst in flight is a few, a flood is not
	}
	if uint32(cn.active) >= cn.s.opts.MaxConcurrentStreams {
		cn.refusals++
		over := cn.refusals > maxRefusalsPerStream*int(cn.s.opts.MaxConcurrentStreams)
		cn.bankClosedLocked(body)
		cn.mu.Unlock()
		if over {
			return cn.fail(http2.ErrCodeEnhanceYourCalm, "too many streams over the limit")
		}
		cn.rst(id, http2.ErrCodeRefusedStream)
		return cn.emptyFrame()
	}
	cn.opening = true
	cn.mu.Unlock()
	if f.HasPriority() && f.Priority.StreamDep == id {
		cn.notOpened(body)
		cn.rst(id, http2.ErrCodeProtocol) // a stream cannot depend on itself (RFC 9113 §5.3.1)
		return cn.emptyFrame()
	}

	st, code := cn.newStream(f)
	if st == nil {
		cn.notOpened(body)
		cn.rst(id, code)
		return cn.emptyFrame()
	}
	cn.mu.Lock()
	cn.opening = false
	if cn.done {
		cn.mu.Unlock()
		return errConnClosed
	}
	cn.streams[id] = st
	if body > 0 {
		cn.closedHeads-- // the stream's own now (see above)
	}
	cn.handlers++
	cn.active++
	cn.empties, cn.refusals = 0, 0
	inline := cn.pend != nil && f.StreamEnded() && cn.active == 1 && cn.lone >= loneFirst &&
		cn.inline == nil && !cn.moved
	switch {
	case inline:
		cn.inline, cn.since = st, cn.s.epoch.Load()
	case cn.active > 1:
		cn.lone = 0
	case cn.lone < loneFirst:
		cn.lone++
	}
	cn.mu.Unlock()
	if inline {
		return cn.serveInline(st)
	}
	cn.s.handlers.Go(st)
	return nil
}

// notOpened ends the opening of a stream that is not served (see
// conn.opening), banking body, the window its DATA in flight may take
// (see onHeaders): a connection drained meanwhile closes, as at a
// stream's end.
func (cn *conn) notOpened(body int64) {
	cn.mu.Lock()
	cn.opening = false
	cn.bankClosedLocked(body)
	closing := cn.goaway && cn.handlers == 0 && !cn.done
	cn.mu.Unlock()
	if closing {
		cn.closeSoon()
	}
}

var (
	errConnClosed = errors.New("h2: connection closed")
	errHalfClosed = errors.New("h2: the client sent on a stream it had ended")
)

// onTrailers takes a HEADERS frame on an open stream: the request's
// trailers, which must end it.
func (cn *conn) onTrailers(st *stream, f *http2.MetaHeadersFrame) error {
	cn.mu.Lock()
	switch {
	case st.reset:
		st.peerDone = st.peerDone || f.StreamEnded() // its trailers came (see closedHeads)
		cn.mu.Unlock()
		return cn.emptyFrame() // in flight after our reset, or a flood
	case st.remoteDone && st.released:
		// Our END_STREAM is out or on its way (release): the stream is
		// closed, though its handler's goroutine has yet to drop it, and
		// a frame after the client's own END_STREAM is a connection
		// error (RFC 9113 §5.1), as once the stream is dropped
		// (onHeaders). Otherwise whether the client got GOAWAY would
		// depend on that goroutine's timing.
		cn.mu.Unlock()
		return cn.fail(http2.ErrCodeStreamClosed, "HEADERS on a closed stream")
	case st.remoteDone:
		cn.mu.Unlock()
		cn.resetStream(st, http2.ErrCodeStreamClosed, errHalfClosed)
		return nil
	}
	bad := ""
	switch {
	case !f.StreamEnded():
		bad = "trailers do not end the stream"
	case f.Truncated:
		// Some of the trailers were dropped (over MaxHeaderBytes):
		// passed on, the rest would reach the host as if they were all.
		bad = "trailers over the header list's bound"
	case len(f.PseudoFields()) > 0:
		bad = "pseudo-header fields in trailers"
	case st.declLen >= 0 && st.gotLen != st.declLen:
		bad = "request body shorter than its content-length"
	}
	if bad == "" && st.body != nil && st.body.declared != nil {
		st.trailer = make(http.Header)
		for _, hf := range f.RegularFields() {
			k := http.CanonicalHeaderKey(hf.Name)
			switch k {
			case "Transfer-Encoding", "Content-Length", "Trailer", "Host", "Te", "Connection", "Keep-Alive", "Upgrade", "Proxy-Connection":
				bad = "field " + hf.Name + " in trailers"
			}
			st.trailer[k] = append(st.trailer[k], hf.Value)
		}
	}
	if bad == "" {
		st.remoteDone = true
	}
	if f.StreamEnded() {
		st.recvWin, st.peerDone = 0, true // the client may send no more (see closedWin)
	}
	cn.mu.Unlock()
	if bad != "" {
		cn.resetStream(st, http2.ErrCodeProtocol, errors.New("h2: "+bad))
		return nil
	}
	if st.body != nil {
		st.body.end()
	}
	return nil
}

func (cn *conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Header().Length) // padding included: it counts against the windows
	data := f.Data()
	cn.mu.Lock()
	if n > cn.recvWin {
		cn.mu.Unlock()
		return cn.fail(http2.ErrCodeFlowControl, "DATA over the connection window")
	}
	cn.recvWin -= n
	st := cn.streams[id]
	if st == nil || st.remoteDone {
		idle := st == nil && cn.idleLocked(id)
		// Frames in flight after the server closed or refused the
		// stream are ignored (RFC 9113 §5.4.2), as far as the window the
		// client had then goes: the stream's own while it is in the
		// table, the closed streams' together (closedWin) once it is
		// not. Those are bytes a client had in flight (a stream of small
		// messages answered early), traffic like any upload. Past that
		// window, or after the client's own END_STREAM or RST_STREAM
		// (which leave it none), they are an error.
		// After the client's END_STREAM, ours being out (or on its
		// way) too, the stream is closed both ways, and a frame on it a
		// connection error of type STREAM_CLOSED (RFC 9113 §5.1), as a
		// HEADERS frame is there (onHeaders, onTrailers): not ignored
		// within the closed streams' window, nor a stream error while
		// the handler's goroutine has yet to drop the stream. A stream
		// the server reset keeps its allowance: what came in flight is
		// ignored.
		// A dropped stream the client reset leaves it nothing in flight
		// either: a stream error STREAM_CLOSED (RFC 9113 §5.1), as a
		// HEADERS frame there is, not ignored within the window other
		// streams left.
		var ended, peerReset bool
		if st == nil {
			reset, closed := cn.closedLocked(id)
			ended, peerReset = closed && !reset, closed && reset
		} else {
			ended = !st.reset && st.released
		}
		if ended {
			cn.mu.Unlock()
			return cn.fail(http2.ErrCodeStreamClosed, "DATA on a closed stream")
		}
		var quiet bool
		if st == nil {
			quiet = !peerReset && n <= cn.closedWin
			if quiet {
				cn.closedWin -= n
			}
		} else {
			quiet = st.reset && n <= st.recvWin
			if quiet {
				st.recvWin -= n
				st.peerDone = st.peerDone || f.StreamEnded() // no trailers follow (see closedHeads)
			}
		}
		cn.mu.Unlock()
		if idle {
			return cn.fail(http2.ErrCodeProtocol, "DATA on an idle stream")
		}
		cn.consumed(nil, n)
		if quiet && n > 0 {
			return nil
		}
		switch {
		case quiet:
		case st != nil:
			// The stream error closes the stream: its handler is
			// told, and sends nothing more on it.
			cn.resetStream(st, http2.ErrCodeStreamClosed, errHalfClosed)
		default:
			cn.rst(id, http2.ErrCodeStreamClosed)
		}
		// Each is a frame answered, and its window given back, that
		// makes no request progress whatever it carries: a client
		// sending nothing else is a flood.
		return cn.emptyFrame()
	}
	if n > st.recvWin {
		cn.mu.Unlock()
		cn.resetStream(st, http2.ErrCodeFlowControl, errors.New("h2: DATA over the stream window"))
		cn.consumed(nil, n)
		return nil
	}
	st.recvWin -= n
	st.gotLen += int64(len(data))
	bad := ""
	if st.declLen >= 0 && (st.gotLen > st.declLen || f.StreamEnded() && st.gotLen != st.declLen) {
		bad = "request body disagrees with its content-length"
	}
	if f.StreamEnded() {
		st.recvWin, st.peerDone = 0, true // the client may send no more (see closedWin)
		if bad == "" {
			st.remoteDone = true
		}
	}
	cn.mu.Unlock()
	if bad != "" {
		cn.resetStream(st, http2.ErrCodeProtocol, errors.New("h2: "+bad))
		cn.consumed(nil, n)
		return nil
	}
	if len(data) > 0 {
		st.body.write(data)
	} else if !f.StreamEnded() {
		if err := cn.emptyFrame(); err != nil {
			return err
		}
	}
	if pad := n - int64(len(data)); pad > 0 {
		cn.consumed(st, pad)
	}
	if f.StreamEnded() {
		st.body.end()
	}
	return nil
}

// consumed returns n bytes of receive window, taken by a handler's reads
// or dropped, to the connection and (st non-nil) the stream, in
// WINDOW_UPDATEs of at least a quarter of a stream's window so that a
// body costs few: the connection's as often as a lone upload's stream's,
// never holding back window the stream has.
func (cn *conn) consumed(st *stream, n int64) {
	if n <= 0 {
		return
	}
	var connInc, stInc int64
	cn.mu.Lock()
	cn.recvUnacked += n
	if cn.recvUnacked >= streamWindow/4 {
		connInc, cn.recvUnacked = cn.recvUnacked, 0
		cn.recvWin += connInc
	}
	if st != nil && !st.remoteDone {
		st.recvUnacked += n
		if st.recvUnacked >= streamWindow/4 {
			stInc, st.recvUnacked = st.recvUnacked, 0
			st.recvWin += stInc
		}
	}
	done := cn.done
	cn.mu.Unlock()
	if done || connInc == 0 && stInc == 0 {
		return
	}
	id := uint32(0)
	if st != nil {
		id = st.id
	}
	cn.sendControl(func(w *http2.Framer) error {
		if connInc > 0 {
			if err := w.WriteWindowUpdate(0, uint32(connInc)); err != nil {
				return err
			}
		}
		if stInc > 0 {
			return w.WriteWindowUpdate(id, uint32(stInc))
		}
		return nil
	})
}

// take reserves up to want bytes of send window for st, waiting while
// the client keeps the connection's or the stream's shut, at most
// WriteStall at a time: then the stream is reset. Without wait, it
// returns 0 at once when there is no window. A stream whose own
// window is open waits for the connection's in line (cn.connWaiters); it
// leaves the line on every way out, handing on what window is left.
func (st *stream) take(want int, wait bool) (int, error) {
	cn := st.cn
	var timer *time.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	woke := false
	for {
		cn.mu.Lock()
		if woke {
			cn.takeWakes++
		}
		if st.reset {
			err := st.resetErr
			cn.leaveLocked(st)
			cn.mu.Unlock()
			return 0, err
		}
		if n := min(int64(want), cn.sendWin, st.sendWin); n > 0 {
			cn.sendWin -= n
			st.sendWin -= n
			cn.leaveLocked(st)
			cn.mu.Unlock()
			return int(n), nil
		}
		if !wait {
			cn.mu.Unlock()
			return 0, nil
		}
		if st.sendWin > 0 {
			cn.queueLocked(st)
		} else {
			cn.leaveLocked(st) // its own window is shut: its WINDOW_UPDATE wakes it
		}
		if st.wait == nil {
			st.wait = make(chan struct{}, 1)
		}
		wake := st.wait
		inline := cn.inline == st
		cn.mu.Unlock()
		if inline {
			cn.moveReading(st) // only a reader can open the window
		}
		if d := cn.s.opts.WriteStall; d > 0 && timer == nil {
			timer = time.NewTimer(d)
			expired = timer.C
		}
		select {
		case <-wake:
			woke = true
		case <-expired:
			err := errors.New("h2: the client kept the stream's window shut")
			cn.resetStream(st, http2.ErrCodeCancel, err)
			cn.mu.Lock()
			cn.leaveLocked(st)
			cn.mu.Unlock()
			return 0, err
		}
	}
}

// queueLocked puts st at the end of the line for the connection's window,
// unless it is in it. Called with cn.mu held.
func (cn *conn) queueLocked(st *stream) {
	if !st.queued {
		st.queued = true
		cn.connWaiters = append(cn.connWaiters, st)
	}
}

// leaveLocked takes st out of the line, if it is in it, and wakes the
// first in line if window is left: whoever leaves hands it on, so
// window the connection has never sits unused while a stream waits for
// it. Called with cn.mu held.
func (cn *conn) leaveLocked(st *stream) {
	if st.queued {
		st.queued = false
		if i := slices.Index(cn.connWaiters, st); i >= 0 {
			cn.connWaiters = slices.Delete(cn.connWaiters, i, i+1)
		}
	}
	cn.wakeConnWaiterLocked()
}

// wakeConnWaiterLocked wakes the first stream waiting for the
// connection's window, if there is window. Called with cn.mu held.
func (cn *conn) wakeConnWaiterLocked() {
	if cn.sendWin > 0 && len(cn.connWaiters) > 0 {
		cn.connWaiters[0].wake()
	}
}

// serve runs the stream's handler (on a pool goroutine, or inline on the
// reader: conn.serveInline), then ends the response and the stream.
func (st *stream) serve() {
	ok := st.call()
	st.w.done.Store(true) // before finish: nothing the handler left behind writes beside it
	free := false         // nothing but the server holds the stream
	if ok {
		st.w.finish()
		if f := st.cn.s.opts.RequestDone; f != nil && st.cn.s.opts.RequestContext != nil {
			free = f(st.req.Context()) && st.body == nil
		}
	} else {
		st.cn.mu.Lock()
		reset := st.reset
		st.cn.mu.Unlock()
		if !reset {
			st.release()
			st.cn.resetStream(st, http2.ErrCodeInternal, errors.New("h2: handler panicked"))
		}
	}
	free = st.recycle() && free
	cn := st.cn
	st.end()
	if free {
		// Last: end has told the connection the stream is over, and
		// nothing of this request touches it after this.
		cn.spare.Store(st)
	}
}

// recycle gives the stream's header maps and response buffers back for
// later streams. Only here, once the handler has returned (after which
// it uses neither map: see Options.Handler) and the response's frames are
// written or the stream reset: nothing of the server's touches them
// after that. A goroutine the handler left behind gets a map of its own
// from Header and errAfterReturn from Write (done), and the stream itself
// is never reused. The map and buffers stay with the stream if a call that
// began before the handler returned is still in them (w.active: a Write
// waiting for window with held bytes in hand). Before end, so that a
// stream whose end is seen (the handler count) has given them back. It
// reports whether it gave back everything: if not, the stream is not
// reused either.
func (st *stream) recycle() bool {
	s, w := st.cn.s, &st.w
	s.putHeader(st.header)
	st.header = nil
	if w.active.Load() != 0 {
		// The call encodes the map too (writeHeader, informational):
		// given to a later stream, as its request's or response's, that
		// stream's fields would go out in this response.
		return false
	}
	s.putHeader(w.hdr)
	if b := w.bufs; b != nil {
		b.block = w.block[:0]
		clear(w.fields) // the strings go with the response
		b.fields = w.fields[:0]
		b.hold = nil
		if cap(w.hold) <= 2*holdBody {
			b.hold = w.hold[:0]
		}
		w.bufs, w.fields, w.block, w.hold = nil, nil, nil, nil
		if cap(b.block) <= maxKeptBlock && cap(b.fields) <= maxKeptOutFields {
			s.outs.Put(b)
		}
	}
	return true
}

// release frees the stream's slot under MaxConcurrentStreams, once its
// handler has returned and before the frame that closes the stream
// (END_STREAM, RST_STREAM) is written: the client may open another as
// soon as it reads that frame, and honours the limit in doing so.
func (st *stream) release() {
	st.cn.mu.Lock()
	st.releaseLocked()
	st.cn.mu.Unlock()
}

func (st *stream) releaseLocked() {
	if !st.released {
		st.released = true
		st.cn.active--
	}
}

// call runs the handler; a panic is logged (http.ErrAbortHandler quietly)
// and reported as !ok.
func (st *stream) call() (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				st.cn.s.log.Error("h2: panic serving request", "remote", st.cn.remote, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			ok = false
		}
	}()
	st.run.ServeHTTP(&st.w, st.req)
	return true
}

// end removes the stream once its handler has returned. A client still
// sending a body it no longer needs is told to stop (RST_STREAM
// NO_ERROR after the response, RFC 9113 §8.1), and what it sent is given
// back to the connection's window.
func (st *stream) end() {
	cn := st.cn
	cn.mu.Lock()
	stop := !st.remoteDone && !st.reset
	st.remoteDone, st.reset = true, true
	if st.resetErr == nil {
		st.resetErr = errStreamDone
	}
	delete(cn.streams, st.id)
	cn.bankClosedLocked(st.recvWin) // what the client may still have in flight on it
	if !st.peerDone {
		cn.closedHeads++ // and its trailers
	} else {
		cn.noteClosedLocked(st.id, st.peerReset)
	}
	st.releaseLocked()
	cn.leaveLocked(st)
	cn.handlers--
	last := cn.handlers == 0
	draining := cn.goaway
	var all chan struct{}
	if last && cn.done {
		if cn.allDone == nil {
			cn.allDone = make(chan struct{})
		}
		all = cn.allDone
	}
	st.wake() // a writer the handler left behind, waiting for window, fails now
	cn.mu.Unlock()
	if stop {
		cn.rst(st.id, http2.ErrCodeNo)
	}
	if st.body != nil {
		cn.consumed(nil, st.body.drop(errStreamDone))
	}
	st.cancel(errStreamDone)
	switch {
	case all != nil:
		close(all)
	case last && draining:
		cn.closeSoon()
	case last:
		cn.armIdle()
	}
}

var errStreamDone = errors.New("h2: the stream has ended")

// reqBody is a request's body: DATA the connection's goroutine received,
// read by the handler.
type reqBody struct {
	st           *stream
	mu           sync.Mutex
	buf          []byte
	kept         *[]byte // the pool's handle that came with buf, if any
	off          int
	eof          bool  // END_STREAM: Read returns io.EOF once buf is read
	err          error // the stream failed: Read returns it at once
	ready        chan struct{}
	needContinue bool // send 100 Continue at the first Read
	// declared is r.Trailer, the keys the request declared: filled from
	// st.trailer by the Read that meets io.EOF, on the goroutine reading
	// the body, as net/http does: the connection's goroutine never
	// touches a map the handler can read.
	declared http.Header
	copied   bool // declared is filled
}

func (b *reqBody) signal() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

func (b *reqBody) write(p []byte) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		b.st.cn.consumed(nil, int64(len(p)))
		return
	}
	if b.off == len(b.buf) {
		b.buf, b.off = b.buf[:0], 0
	} else if b.off > 0 && len(b.buf)+len(p) > cap(b.buf) {
		// Let go of what was read before growing: a body read more
		// slowly than it arrives is never drained, and append would
		// carry the read bytes along for the whole upload.
		n := copy(b.buf, b.buf[b.off:])
		b.buf, b.off = b.buf[:n], 0
	}
	if cap(b.buf) == 0 {
		b.kept = b.st.cn.s.bodyBuf()
		b.buf, *b.kept = (*b.kept)[:0], nil
	}
	b.buf = append(b.buf, p...)
	b.mu.Unlock()
	b.signal()
}

func (b *reqBody) end() {
	b.mu.Lock()
	b.eof = true
	b.mu.Unlock()
	b.signal()
}

func (b *reqBody) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	b.signal()
}

// drop fails the body and returns how many received bytes were never read.
// A Read waiting on another goroutine returns too (Close must unblock it,
// as http.Request.Body's contract says). The buffer goes back for later
// streams' bodies: with err set under mu, no Read or write touches it
// again, whoever holds the body.
func (b *reqBody) drop(err error) int64 {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	n := len(b.buf) - b.off
	buf, kept := b.buf, b.kept
	b.buf, b.kept, b.off = nil, nil, 0
	b.mu.Unlock()
	b.signal()
	b.st.cn.s.putBodyBuf(kept, buf)
	return int64(n)
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.needContinue {
		b.needContinue = false
		b.st.w.writeContinue()
	}
	if len(p) == 0 {
		return 0, nil
	}
	b.mu.Lock()
	for {
		if b.err != nil {
			err := b.err
			b.mu.Unlock()
			return 0, err
		}
		if b.off < len(b.buf) {
			n := copy(p, b.buf[b.off:])
			b.off += n
			if b.off == len(b.buf) && cap(b.buf) > keepBodyBuf {
				// Drained: a large buffer goes, so that what the
				// connection holds follows its window, not the number
				// of streams that once had a window's worth.
				b.buf, b.off = nil, 0
			} else if left := len(b.buf) - b.off; cap(b.buf) > 4*keepBodyBuf && left <= cap(b.buf)/8 {
				// Mostly read: what is left moves to a buffer twice
				// its size, or a body left short of its end (a host
				// that stopped taking it) would keep the most of it
				// that ever waited, up to a window's worth on each of
				// the connection's streams. Only a large buffer, and
				// only when an eighth of it is left, so that an upload
				// read as it comes seldom pays for it: the copies come
				// to a sixth of the buffer's size at most.
				nb := make([]byte, left, max(2*left, keepBodyBuf))
				copy(nb, b.buf[b.off:])
				b.buf, b.off = nb, 0
			}
			b.mu.Unlock()
			b.st.cn.consumed(b.st, int64(n))
			return n, nil
		}
		if b.eof {
			if !b.copied {
				// st.trailer was written before end set eof under mu:
				// it is final.
				for k, vs := range b.st.trailer {
					if _, ok := b.declared[k]; ok {
						b.declared[k] = vs
					}
				}
				b.copied = true
			}
			b.mu.Unlock()
			return 0, io.EOF
		}
		b.mu.Unlock()
		if !b.wait() {
			b.fail(errBodyStalled)
		}
		b.mu.Lock()
	}
}

// wait waits for the connection's goroutine to signal more of the body,
// at most BodyStall; false: it did not come.
func (b *reqBody) wait() bool {
	stall := b.st.cn.s.opts.BodyStall
	if stall <= 0 {
		<-b.ready
		return true
	}
	t := time.NewTimer(stall)
	defer t.Stop()
	select {
	case <-b.ready:
		return true
	case <-t.C:
		return false
	}
}

// errBodyStalled is a body Read's error when the client sent nothing for
// BodyStall: a timeout, as a connection's read deadline gives.
var errBodyStalled error = stallError{}

type stallError struct{}

func (stallError) Error() string   { return "h2: the request body stalled" }
func (stallError) Timeout() bool   { return true }
func (stallError) Temporary() bool { return true }

// Close fails later Reads; what the client sends from then on is dropped.
func (b *reqBody) Close() error {
	b.st.cn.consumed(nil, b.drop(errBodyClosed))
	return nil
}

var errBodyClosed = errors.New("h2: request body closed")

// keepBodyBuf is the largest buffer a drained body keeps for the next
// DATA: a couple of frames.
const keepBodyBuf = 32 << 10
