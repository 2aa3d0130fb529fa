package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// conn is one HTTP/2 connection. One goroutine at a time reads its frames
// (serve's, or readOn's once an inline handler moved the reading on:
// "the reader" below); handlers write theirs under wmu.
type conn struct {
	s      *Server
	c      net.Conn
	remote string
	tls    *tls.ConnectionState
	// ctx is the streams' contexts' parent: values only, never
	// cancelled. Each stream's context is cancelled by the stream itself
	// (its end, a reset, or close aborting every stream), so that a
	// stream's does not join a cancellable parent's list of children: a
	// lock, a map insert and a delete per request (0.7 µs of an HTTP/2
	// request's ~75 in the load harness's profile).
	ctx context.Context
	fr  *http2.Framer // the reading side; the reader's alone
	hb  blockReader   // decodes request header blocks; the reader's alone
	// spare is a stream that ended with nothing left holding it
	// (stream.serve), for the reader's next one. Per connection, not
	// pooled across them: only the reader takes it, between two frames,
	// so a stream the reader looked up for a frame (a reset, trailers) is
	// never another request's by the time the reader acts on it.
	spare atomic.Pointer[stream]
	// closing says the reader is to end the connection (wakeToEnd).
	closing atomic.Bool

	// gmu orders the GOAWAYs: one naming the last stream never goes out
	// before one naming 2^31-1 (goAwayGracefully), as a GOAWAY may not
	// name a higher stream than an earlier one did (RFC 9113 §6.8). It
	// orders their queueing (queueControl) and is let go before any
	// write or wait for wmu. A connection error's (fail) goes out last
	// without it: see fail.
	gmu sync.Mutex

	// The writing side. wmu orders frames on the wire, and guards enc:
	// response header blocks are encoded as they go out (see hpack.go).
	wmu  sync.Mutex
	bw   bufWriter
	wf   *http2.Framer // writes into bw
	werr error         // the first write error: every later write fails
	enc  encoder
	// peerTable is the least SETTINGS_HEADER_TABLE_SIZE the client has
	// sent: the first header block after it goes below our table's size
	// starts with the update that lowers it (see encoder.shrink).
	peerTable atomic.Uint32
	// dataOut counts the DATA frames written, for the bound on the
	// client's WINDOW_UPDATEs (winUpdates): added to under wmu, read by
	// the reader, which never waits for wmu for it.
	dataOut atomic.Int64
	// peerMaxFrame is the client's SETTINGS_MAX_FRAME_SIZE. Written
	// before the SETTINGS' ACK is queued, and read only under wmu: a
	// frame sized by it goes out before that ACK, or was sized by the
	// new value (RFC 9113 §6.5.3: a lowered size binds after the ACK).
	peerMaxFrame atomic.Uint32

	// Control frames queued by the reader while a handler holds wmu (see
	// sendControl): encoded into cbuf by cf. cout, under wmu, holds them
	// as they are written (takeControlLocked): the two buffers swap.
	cmu  sync.Mutex
	cbuf bytes.Buffer
	cf   *http2.Framer
	cout bytes.Buffer

	// mu guards the stream table, flow control on both sides and the
	// connection's state.
	mu           sync.Mutex
	streams      map[uint32]*stream
	sendWin      int64  // the connection's send window
	peerInitWin  int64  // SETTINGS_INITIAL_WINDOW_SIZE of the client
	recvWin      int64  // what the client may still send on the connection
	recvUnacked  int64  // taken by handlers or dropped, not yet returned by WINDOW_UPDATE
	lastID       uint32 // highest stream id the client opened
	handlers     int    // handlers running; they count until they return
	opening      bool   // the reader is building a stream it has taken as lastID
	active       int    // streams counted against MaxConcurrentStreams (see stream.release)
	goaway       bool   // GOAWAY sent: no new stream is served
	goneAt       uint32 // the last stream the GOAWAY names: a later one (fail) names none higher
	graceful     bool   // goAwayGracefully's GOAWAY is out; the last stream is yet to be named (graceTimer bounds it)
	settled      bool   // our SETTINGS are written: a GOAWAY may follow
	drainLater   bool   // startDrain was called before settled
	done         bool   // closed
	lingering    bool   // closed, its socket left open for linger
	idleTimer    *time.Timer
	graceTimer   *time.Timer
	idlePending  bool          // idleTimer will fire (see armIdle)
	idleSince    time.Time     // when handlers last dropped to 0
	allDone      chan struct{} // closed when handlers drops to 0 after done
	refusals     int
	empties      int // frames that carried nothing since a stream last started
	emptiesSince time.Time
	winUpdates   int64 // WINDOW_UPDATEs received (see windowUpdatesFree)
	pings        int64 // PINGs received, not ACKs (see pingsFree)
	takeWakes    int   // how often a take woke to look again: tests bound it

	// closedWin is the DATA the client may still send, in flight when
	// the server ended or refused the streams it is for, on streams no
	// longer in the table: their windows as they were, less what came
	// since. DATA on those streams within it is ignored (RFC 9113
	// §5.4.2); past it, answered and counted as a frame without progress.
	// Never over the connection's window (bankClosedLocked).
	closedWin int64
	// closedHeads is how many of those streams the client had not ended
	// when the server ended or refused them: each may still have its
	// trailers in flight, a header block ignored as its DATA is. No cap:
	// what it spares such a block is a GOAWAY, not the count of frames
	// without progress (onHeaders), so banking them buys a client nothing.
	closedHeads int

	// recent is how the last streams the client ended or reset closed,
	// a ring (next: recentAt), so that a HEADERS frame on one is answered
	// as RFC 9113 §5.1 says for how it closed (onHeaders). A stream closed
	// longer ago is taken as one never opened.
	recent   [recentClosed]closedStream
	recentAt int

	// connWaiters are the streams whose take waits for the connection's
	// window (their own is open), first come first: a WINDOW_UPDATE on
	// the connection wakes the first, and each one that leaves the line
	// while window is left wakes the next, so a client's tiny updates
	// cost a wake-up each, not one per stream (see stream.take).
	connWaiters []*stream

	// inline is the stream whose handler runs on the reading goroutine
	// (serveInline), since the server's watcher epoch since; moved says
	// the reading went on to another goroutine. lone counts the requests
	// in a row, up to loneFirst, that came with no other stream open.
	// pend looks at the socket without reading; nil when the connection
	// cannot, and then no handler runs inline. busy is inline != nil, for
	// the watcher to skip the others without their lock. listed says the
	// connection is in the server's inl, at at (both under s.imu; listed
	// read by the reader alone).
	inline *stream
	since  uint64
	moved  bool
	lone   int
	pend   pender
	busy   atomic.Bool
	listed bool
	at     int
}

func newConn(s *Server, c net.Conn) *conn {
	cn := &conn{
		s:           s,
		c:           c,
		remote:      c.RemoteAddr().String(),
		streams:     map[uint32]*stream{},
		sendWin:     65535,
		peerInitWin: 65535,
		recvWin:     65535,
	}
	under := c
	if tc, ok := c.(*tls.Conn); ok {
		st := tc.ConnectionState()
		cn.tls = &st
		under = tc.NetConn()
	} else if tc, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := tc.ConnectionState()
		cn.tls = &st
		under = nil // a TLS layer whose buffer and socket are out of reach
	}
	cn.pend, _ = under.(pender)
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.opts.Server)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.LocalAddr())
	cn.ctx = ctx
	cn.fr = http2.NewFramer(nil, c)
	cn.hb.init(&s.fields)
	cn.fr.MaxHeaderListSize = s.maxList
	cn.fr.SetMaxReadFrameSize(maxFrameRead)
	cn.peerMaxFrame.Store(16384)
	cn.enc.max = maxTable
	cn.peerTable.Store(maxTable)
	cn.bw = bufWriter{c: c, pool: &s.bufs}
	cn.wf = http2.NewFramer(&cn.bw, nil)
	cn.cf = http2.NewFramer(&cn.cbuf, nil)
	return cn
}

// serve reads the connection until it ends, then waits for its handlers;
// or, when an inline handler handed the reading on, returns once that
// handler has (the goroutine reading last ends the connection).
func (cn *conn) serve() {
	err := cn.run()
	if err == errMoved {
		return
	}
	cn.end(err)
}

// end closes the connection, waits for its handlers and lets it go.
func (cn *conn) end(err error) {
	defer cn.s.remove(cn)
	if cn.listed {
		defer cn.s.unlist(cn)
	}
	var ce connError
	if errors.As(err, &ce) || cn.closing.Load() {
		cn.linger(err)
	} else {
		cn.close(err)
	}
	cn.mu.Lock()
	wait := cn.handlers > 0
	if wait && cn.allDone == nil {
		cn.allDone = make(chan struct{})
	}
	ch := cn.allDone
	cn.mu.Unlock()
	if wait {
		<-ch
	}
	cn.wmu.Lock()
	cn.bw.release()
	if cn.werr == nil {
		cn.werr = net.ErrClosed
	}
	cn.wmu.Unlock()
}

// frameSize is the largest frame to write: the client's
// SETTINGS_MAX_FRAME_SIZE, but never over maxFrameWrite. Under wmu.
func (cn *conn) frameSize() int {
	return int(min(cn.peerMaxFrame.Load(), maxFrameWrite))
}

// A connError ends the connection with GOAWAY and its code.
type connError struct {
	code http2.ErrCode
	why  string
}

func (e connError) Error() string { return fmt.Sprintf("h2: connection error %v: %s", e.code, e.why) }

func (cn *conn) run() error {
	if t := cn.s.opts.ReadHeaderTimeout; t > 0 {
		cn.setReadDeadline(time.Now().Add(t))
	}
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(cn.c, pre[:]); err != nil {
		return err
	}
	if string(pre[:]) != http2.ClientPreface {
		return errors.New("h2: bad client preface")
	}
	if err := cn.writeSettings(); err != nil {
		return err
	}
	cn.mu.Lock()
	cn.settled = true
	drain := cn.drainLater
	cn.mu.Unlock()
	if drain {
		cn.startDrain()
	}
	f, err := cn.fr.ReadFrame()
	if _, ok := err.(http2.StreamError); ok {
		// A frame malformed as a stream's is still not SETTINGS: the
		// connection's error, not that stream's (RFC 9113 §3.4).
		return cn.fail(http2.ErrCodeProtocol, "first frame is not SETTINGS")
	}
	if err != nil {
		return cn.readError(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return cn.fail(http2.ErrCodeProtocol, "first frame is not SETTINGS")
	}
	if err := cn.onSettings(sf); err != nil {
		return err
	}
	cn.setReadDeadline(time.Time{})
	cn.armIdle()
	return cn.loop()
}

// errMoved ends a reading goroutine whose inline handler handed the
// reading on: another goroutine reads the connection now.
var errMoved = errors.New("h2: reading moved on")

// loop reads frames until the connection ends or the reading moves on.
func (cn *conn) loop() error {
	for {
		f, err := cn.readFrame()
		if err != nil {
			cn.hb.done()
			if err = cn.readError(err); err != nil {
				return err
			}
			continue
		}
		err = cn.onFrame(f)
		if err == errMoved {
			return err // hb is the new reader's
		}
		cn.hb.done()
		if err != nil {
			return err
		}
	}
}

// readFrame reads the next frame; a HEADERS frame comes with its block
// decoded (the CONTINUATIONs read too), as a MetaHeadersFrame valid until
// hb.done.
func (cn *conn) readFrame() (http2.Frame, error) {
	fh, err := cn.fr.ReadFrameHeader()
	if err != nil {
		return nil, err
	}
	f, err := cn.fr.ReadFrameForHeader(fh)
	if _, ok := err.(http2.StreamError); ok && fh.Type == http2.FrameHeaders {
		// The Framer's one stream error for a HEADERS frame is padding
		// past its payload (x/net's parseHeadersFrame), which RFC 9113
		// §6.2 makes a connection error: the block is never decoded, so
		// the connection's HPACK table is no longer the client's, and a
		// reset stream would leave every later block decoded against it.
		return nil, http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
		if t := cn.s.opts.ReadHeaderTimeout; t > 0 && !hf.HeadersEnded() {
			// A head trickled in CONTINUATIONs is bounded as an HTTP/1
			// head is (DESIGN §3: headers within read_header_timeout),
			// not by the idle timeout alone: until END_HEADERS no other
			// frame may come, so the connection is held for it.
			cn.setReadDeadline(time.Now().Add(t))
			defer cn.setReadDeadline(time.Time{})
		}
		mh, err := cn.hb.read(cn.fr, hf)
		if err != nil {
			return nil, err
		}
		return mh, nil
	}
	return f, err
}

// writeSettings sends the server's SETTINGS and opens the connection's
// receive window to connWindow.
func (cn *conn) writeSettings() error {
	cn.mu.Lock()
	cn.recvWin = connWindow
	cn.mu.Unlock()
	cn.wmu.Lock()
	defer cn.unlockWrite()
	if cn.werr != nil {
		return cn.werr
	}
	err := cn.wf.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: cn.s.opts.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrameRead},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: cn.s.maxList},
	)
	if err == nil {
		err = cn.wf.WriteWindowUpdate(0, connWindow-65535)
	}
	if err == nil {
		err = cn.bw.Flush()
	}
	if err != nil {
		cn.werr = err
	}
	return err
}

// readError sorts an error of ReadFrame: a stream error resets that
// stream and reading goes on (nil); anything else ends the connection.
func (cn *conn) readError(err error) error {
	var se http2.StreamError
	switch {
	case errors.As(err, &se):
		cn.mu.Lock()
		if se.StreamID%2 == 1 && se.StreamID > cn.lastID {
			cn.lastID = se.StreamID           // a malformed head still uses its id
			cn.bankClosedLocked(streamWindow) // and its body may be on the way (see onHeaders)
			cn.closedHeads++
		}
		st := cn.streams[se.StreamID]
		cn.mu.Unlock()
		if st != nil {
			st.abort(fmt.Errorf("h2: stream error: %w", err))
		}
		cn.sendControl(func(f *http2.Framer) error { return f.WriteRSTStream(se.StreamID, se.Code) })
		// A refused frame (a header block malformed as it decodes, a
		// WINDOW_UPDATE of 0) made no progress, as one refused later
		// (onHeaders): a client sending nothing else is a flood.
		return cn.emptyFrame()
	case errors.Is(err, http2.ErrFrameTooLarge):
		return cn.fail(http2.ErrCodeFrameSize, "frame over SETTINGS_MAX_FRAME_SIZE")
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		return cn.fail(http2.ErrCode(ce), err.Error())
	}
	return err
}

// fail sends GOAWAY with code and returns the error that ends serve.
// Nothing is written after that GOAWAY: the connection ends (linger).
// It goes out behind the control frames queued before it (a GOAWAY
// 2^31-1 among them: RFC 9113 §6.8, no GOAWAY may name a higher stream
// than an earlier one did), and a frame queued after it is dropped
// (errGoneAway). Not under gmu: fail waits for the write lock, which a
// write stuck on a client that reads nothing holds, and gmu held
// meanwhile stopped every other GOAWAY's sender (a handler's Connection:
// close, a drain, the grace's end) with it. A GOAWAY on its way under gmu
// is queued before fail's or finds goaway set, and is then not sent or
// dropped: mu and the queue order them, gmu is not needed.
func (cn *conn) fail(code http2.ErrCode, why string) error {
	cn.mu.Lock()
	last := cn.lastID
	if cn.goaway {
		// Streams read since were refused: a GOAWAY may not name a
		// higher stream than an earlier one did (RFC 9113 §6.8).
		last = min(last, cn.goneAt)
	}
	cn.goaway, cn.goneAt = true, last
	if cn.graceful {
		cn.graceful = false // its last stream is named here
		cn.graceTimer.Stop()
	}
	cn.mu.Unlock()
	// Queued under wmu, not before taking it: a handler holding wmu
	// would send the GOAWAY with its own frames (unlockWrite), then write
	// on, taking wmu again before fail did. Queued and taken from the
	// queue in one hold of cmu: a frame queued between the two went out
	// after the GOAWAY.
	cn.wmu.Lock()
	cn.cmu.Lock()
	_ = cn.cf.WriteGoAway(last, code, nil)
	cn.takeControlLocked()
	cn.cmu.Unlock()
	cn.flushControl()
	if cn.werr == nil {
		// A handler's frame, a drain's GOAWAY queued before the
		// connection ends, is dropped; the connection is not closed at
		// once (unlockWrite), its reader lingers.
		cn.werr = errGoneAway
	}
	cn.wmu.Unlock()
	return connError{code, why}
}

// errGoneAway fails the writes after a connection error's GOAWAY.
var errGoneAway = errors.New("h2: the connection went away on an error")

func (cn *conn) onFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return cn.onHeaders(f)
	case *http2.DataFrame:
		return cn.onData(f)
	case *http2.WindowUpdateFrame:
		return cn.onWindowUpdate(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return cn.emptyFrame() // we send one SETTINGS: more ACKs are noise
		}
		if err := cn.onSettings(f); err != nil {
			return err
		}
		return cn.emptyFrame()
	case *http2.PingFrame:
		if f.IsAck() {
			if string(f.Data[:]) == gracePing && cn.endGrace() {
				return nil
			}
			return cn.emptyFrame()
		}
		if f.StreamID != 0 {
			return cn.fail(http2.ErrCodeProtocol, "PING on a stream")
		}
		data := f.Data
		cn.sendControl(func(w *http2.Framer) error { return w.WritePing(true, data) })
		cn.mu.Lock()
		cn.pings++
		spent := cn.pings > pingsFree+pingsPerData*cn.dataOut.Load()
		cn.mu.Unlock()
		if spent {
			return cn.emptyFrame()
		}
		return nil
	case *http2.RSTStreamFrame:
		return cn.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			// A stream error (RFC 9113 §5.3.1): an open stream ends here
			// too, its handler told, as its RST_STREAM ends it for the
			// client; an idle one is only answered.
			cn.mu.Lock()
			st := cn.streams[f.StreamID]
			cn.mu.Unlock()
			if st != nil {
				cn.resetStream(st, http2.ErrCodeProtocol, errors.New("h2: a stream made to depend on itself"))
			} else {
				cn.rst(f.StreamID, http2.ErrCodeProtocol)
			}
		}
		return cn.emptyFrame()
	case *http2.GoAwayFrame:
		cn.startDrain() // the client opens no more streams; ours finish
		return nil
	case *http2.PushPromiseFrame:
		return cn.fail(http2.ErrCodeProtocol, "PUSH_PROMISE from a client")
	case *http2.ContinuationFrame:
		return cn.fail(http2.ErrCodeProtocol, "CONTINUATION outside a header block")
	default: // unknown types are ignored (RFC 9113 §5.5)
		return cn.emptyFrame()
	}
}

// emptyFrame counts a frame that made no request progress; a client that
// sends only such frames is told to go away.
func (cn *conn) emptyFrame() error {
	cn.mu.Lock()
	if now := time.Now(); now.Sub(cn.emptiesSince) > emptyWindow {
		cn.empties, cn.emptiesSince = 0, now
	}
	cn.empties++
	n := cn.empties
	cn.mu.Unlock()
	if n > maxEmptyFrames {
		return cn.fail(http2.ErrCodeEnhanceYourCalm, "too many frames without a request")
	}
	return nil
}

func (cn *conn) onSettings(f *http2.SettingsFrame) error {
	if f.StreamID != 0 {
		return cn.fail(http2.ErrCodeProtocol, "SETTINGS on a stream")
	}
	if f.NumSettings() > maxSettings {
		// Not the RFC's rule but x/net's: no client sends so many, and
		// reading them costs the server as a flood does.
		return cn.fail(http2.ErrCodeProtocol, "SETTINGS frame with too many settings")
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return cn.fail(http2.ErrCode(ce), err.Error())
		}
		return cn.fail(http2.ErrCodeProtocol, err.Error())
	}
	cn.mu.Lock()
	// The initial window sizes are taken in order (RFC 9113 §6.5.3) with
	// one walk of the open streams for the frame, not one for each: a
	// stream's window goes over 2^31-1 at some value iff it does at the
	// frame's largest, and ends changed by its last.
	was, peak, last := cn.peerInitWin, cn.peerInitWin, int64(-1)
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			last = int64(s.Val)
			peak = max(peak, last)
		case http2.SettingMaxFrameSize:
			cn.peerMaxFrame.Store(s.Val)
		case http2.SettingHeaderTableSize:
			if s.Val < cn.peerTable.Load() {
				cn.peerTable.Store(s.Val)
			}
		}
		return nil
	})
	over := false
	if last >= 0 {
		cn.peerInitWin = last
		for _, st := range cn.streams {
			if st.sendWin+peak-was > 1<<31-1 {
				over = true
				break
			}
			prev := st.sendWin
			st.sendWin += last - was
			if prev <= 0 && st.sendWin > 0 {
				st.wake() // only a writer waiting for its own window
			}
		}
	}
	cn.mu.Unlock()
	if over {
		return cn.fail(http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a window")
	}
	cn.sendControl(func(w *http2.Framer) error { return w.WriteSettingsAck() })
	return nil
}

func (cn *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	cn.mu.Lock()
	if f.StreamID != 0 && cn.streams[f.StreamID] == nil && cn.idleLocked(f.StreamID) {
		cn.mu.Unlock()
		return cn.fail(http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
	}
	// Counted wherever it goes: on a stream the server has ended, or
	// reset, as on an open one, for a client goes on reading what it was
	// sent before the end, and updating the stream's window as it does
	// (Go's client, up to its 4 MiB window's worth: a thousand updates).
	spent := cn.windowUpdateLocked()
	var st *stream
	over := false
	if f.StreamID == 0 {
		cn.sendWin += inc
		over = cn.sendWin > 1<<31-1
		if !over {
			cn.wakeConnWaiterLocked()
		}
	} else if st = cn.streams[f.StreamID]; st != nil && !st.reset {
		// A reset stream's window matters no more, and is not added
		// to, so that a window taken over 2^31-1 resets the stream
		// once, not at each update after.
		st.sendWin += inc
		over = st.sendWin > 1<<31-1
		st.wake()
	}
	cn.mu.Unlock()
	switch {
	case over && st == nil:
		return cn.fail(http2.ErrCodeFlowControl, "connection window over 2^31-1")
	case over:
		st.abort(errors.New("h2: stream window over 2^31-1"))
		cn.sendControl(func(w *http2.Framer) error { return w.WriteRSTStream(f.StreamID, http2.ErrCodeFlowControl) })
	}
	if spent {
		return cn.emptyFrame()
	}
	return nil
}

// windowUpdateLocked counts a WINDOW_UPDATE and reports whether it is
// past the client's allowance (windowUpdatesFree): one more frame
// without progress. The update still applies: a client past it is
// counted, not refused. Called with cn.mu held.
func (cn *conn) windowUpdateLocked() bool {
	cn.winUpdates++
	return cn.winUpdates > windowUpdatesFree+windowUpdatesPerData*cn.dataOut.Load()
}

// bankClosedLocked adds n to closedWin, up to the connection's window:
// whatever streams it is for, a client never has more than that in
// flight (RFC 9113 §6.9: more is a FLOW_CONTROL_ERROR), and a bank past
// it would let a client that left many bodies unsent spend it later on
// small DATA frames on closed streams, uncounted. Called with cn.mu held.
func (cn *conn) bankClosedLocked(n int64) {
	cn.closedWin = min(cn.closedWin+n, connWindow)
}

// recentClosed is how many closed streams a connection remembers: a
// frame on a closed stream is a client's mistake, made on a stream it
// has just closed.
const recentClosed = 8

// closedStream is a stream the client closed: reset says with
// RST_STREAM, not with END_STREAM; id 0 is none.
type closedStream struct {
	id    uint32
	reset bool
}

// noteClosedLocked remembers that the client closed stream id (recent).
// Called with cn.mu held.
func (cn *conn) noteClosedLocked(id uint32, reset bool) {
	cn.recent[cn.recentAt] = closedStream{id, reset}
	cn.recentAt = (cn.recentAt + 1) % recentClosed
}

// closedLocked reports whether the client closed stream id lately, and
// whether it did with RST_STREAM. Called with cn.mu held.
func (cn *conn) closedLocked(id uint32) (reset, ok bool) {
	for _, c := range cn.recent {
		if c.id == id {
			return c.reset, true
		}
	}
	return false, false
}

// idleLocked reports whether stream id is idle (RFC 9113 §5.1): one the
// client has yet to open, or one the server would open (an even id),
// which it never does. Called with cn.mu held.
func (cn *conn) idleLocked(id uint32) bool {
	return id > cn.lastID || id%2 == 0
}

func (cn *conn) onReset(f *http2.RSTStreamFrame) error {
	cn.mu.Lock()
	st := cn.streams[f.StreamID]
	idle := st == nil && cn.idleLocked(f.StreamID)
	again := st != nil && st.reset // by either side; its handler runs on
	if st != nil {
		st.peerReset, st.peerDone = true, true
		st.recvWin = 0 // the client sends no more on it (see closedWin)
	}
	cn.mu.Unlock()
	if idle {
		return cn.fail(http2.ErrCodeProtocol, "RST_STREAM on an idle stream")
	}
	if st == nil || again {
		// A closed or reset stream: a reset that crossed its end is
		// harmless, but it changes nothing, and a stream of them is a
		// flood.
		return cn.emptyFrame()
	}
	st.abort(fmt.Errorf("h2: stream reset by the client: %v", f.ErrCode))
	return nil
}

// sendControl has write's frame sent: at once if the write lock is free,
// otherwise by the handler that holds it, before it lets go (unlockWrite).
// The queue is bounded: past maxControlQueue the caller waits for the
// lock, so a client that floods and does not read stops being read.
func (cn *conn) sendControl(write func(*http2.Framer) error) {
	if cn.queueControl(write) {
		cn.wmu.Lock()
		cn.unlockWrite()
		return
	}
	cn.pushControl()
}

// queueControl queues write's frame, and reports whether the queue is
// past maxControlQueue. The GOAWAYs' senders queue theirs under gmu, and
// push it (pushControl) or leave it to the write lock's holder with gmu
// let go, never waiting for the lock: what they add past the bound is a
// few frames, once in the connection's life, and a write stuck on a
// client that reads nothing, waited for or made under gmu, held every
// other GOAWAY's sender with it (a handler's Connection: close in
// WriteHeader).
func (cn *conn) queueControl(write func(*http2.Framer) error) (full bool) {
	cn.cmu.Lock()
	defer cn.cmu.Unlock()
	_ = write(cn.cf)
	return cn.cbuf.Len() > maxControlQueue
}

// pushControl sends the queued control frames if the write lock is free;
// otherwise its holder does, before it lets go (unlockWrite). A full
// queue has a holder, or a sendControl on its way to the lock, that sends
// it all.
func (cn *conn) pushControl() {
	if cn.wmu.TryLock() {
		cn.unlockWrite()
	}
}

// unlockWrite sends the queued control frames, flushes, and lets go of
// wmu; if frames were queued after that, and the lock is free, it sends
// those too. Every holder of wmu lets go through here, so a frame queued
// while wmu was held is sent by the holder or by whoever queued it.
func (cn *conn) unlockWrite() {
	for {
		cn.writeControl()
		err := cn.werr
		cn.wmu.Unlock()
		if err == errGoneAway {
			return // the reader ends the connection (fail)
		}
		if err != nil {
			cn.close(err)
			return
		}
		cn.cmu.Lock()
		more := cn.cbuf.Len() > 0
		cn.cmu.Unlock()
		if !more || !cn.wmu.TryLock() {
			return
		}
	}
}

// writeControl writes the queued control frames and flushes. Under wmu.
func (cn *conn) writeControl() {
	cn.cmu.Lock()
	cn.takeControlLocked()
	cn.cmu.Unlock()
	cn.flushControl()
}

// takeControlLocked moves the queued control frames to cout, for
// flushControl to write with cmu let go: a write stuck on a client that
// reads nothing then holds only wmu, and the reader (sendControl) goes on
// queueing. Under wmu and cmu.
func (cn *conn) takeControlLocked() {
	cn.cbuf, cn.cout = cn.cout, cn.cbuf
}

// flushControl writes what takeControlLocked took and flushes. Under wmu.
func (cn *conn) flushControl() {
	if cn.cout.Len() > 0 && cn.werr == nil {
		_, err := cn.bw.Write(cn.cout.Bytes())
		if err != nil {
			cn.werr = err
		}
	}
	cn.cout.Reset()
	if cn.cout.Cap() > keepControlBuf {
		cn.cout = bytes.Buffer{} // a burst's buffer goes with the burst
	}
	if cn.bw.Buffered() > 0 && cn.werr == nil {
		if err := cn.bw.Flush(); err != nil {
			cn.werr = err
		}
	}
}

// close ends the connection: every stream's context and body fail, and
// the socket closes (the reading goroutine's ReadFrame returns).
func (cn *conn) close(err error) {
	if cn.shut(err, false) {
		_ = cn.c.Close()
	}
}

// linger ends the connection after a GOAWAY the client may not have read
// yet, on the reading goroutine: closed with the client's frames unread,
// the socket would send a reset, which drops what the socket has yet to
// send (the GOAWAY, behind DATA the client is still reading) and reaches
// a client before the reason it was closed ("connection reset by peer").
// So the server's side ends first (TLS close_notify, TCP FIN), and what
// the client goes on sending is read and dropped, up to lingerBytes for
// lingerFor, or until the client closes its side, as x/net's server reads
// on for a second after its GOAWAY and nginx's lingering close does.
// Server.Close cuts it short (cut).
func (cn *conn) linger(err error) {
	if !cn.shut(err, true) {
		return // closed already: by Server.Close
	}
	c := cn.endWriting()
	if c.SetReadDeadline(time.Now().Add(lingerFor)) == nil {
		_, _ = io.CopyN(io.Discard, c, lingerBytes)
	}
	_ = cn.c.Close()
}

// lingerFor and lingerBytes bound linger: x/net's server's second
// (goAwayTimeout), and the connection's window, the most DATA a client
// may have in flight.
const (
	lingerFor   = time.Second
	lingerBytes = connWindow
)

// endWriting ends the server's side of the connection, and returns the
// connection to read out: under TLS, the socket beneath (its records need
// no decrypting to be dropped).
func (cn *conn) endWriting() net.Conn {
	// A handler's write stuck on a client that reads nothing holds the
	// TLS layer's lock that CloseWrite takes: it fails by then.
	_ = cn.c.SetWriteDeadline(time.Now().Add(lingerFor))
	c := cn.c
	if tc, ok := c.(*tls.Conn); ok {
		_ = tc.CloseWrite() // close_notify; the socket is left open
		c = tc.NetConn()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return c
}

// cut is Server.Close's close: a lingering connection closes too. An
// open one's socket is closed beneath TLS, as endLinger's is, with no
// close_notify: the TLS Close writes one first, which on a client that
// reads nothing (its socket full, no write in progress to fail it) waits
// up to crypto/tls's 5 s, and Close cuts each connection in turn with
// the server's lock held. Once shut has failed, done is set and so is
// lingering if it will ever be: endLinger then sees a linger that began
// since.
func (cn *conn) cut() {
	if cn.shut(errServerClosed, false) {
		_ = cn.socket().Close()
		return
	}
	cn.endLinger()
}

// endLinger closes the connection if it lingers, and reports whether it
// did. The socket beneath TLS is closed, not the TLS connection: its
// Close writes close_notify, which waits behind a write stuck on a client
// that reads nothing (up to linger's write deadline). linger's own Close
// follows, on the reading goroutine.
func (cn *conn) endLinger() bool {
	cn.mu.Lock()
	lingering := cn.done && cn.lingering
	cn.mu.Unlock()
	if lingering {
		_ = cn.socket().Close()
	}
	return lingering
}

// socket is the connection beneath TLS, or the connection itself.
func (cn *conn) socket() net.Conn {
	if tc, ok := cn.c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return cn.c
}

// shut ends the connection's streams, and reports whether it was open;
// lingering says its socket stays open for linger, which closes it.
func (cn *conn) shut(err error, lingering bool) bool {
	cn.mu.Lock()
	if cn.done {
		cn.mu.Unlock()
		return false
	}
	cn.done = true
	cn.lingering = lingering
	if cn.idleTimer != nil {
		cn.idleTimer.Stop()
	}
	if cn.graceTimer != nil {
		cn.graceTimer.Stop()
	}
	streams := make([]*stream, 0, len(cn.streams))
	for _, st := range cn.streams {
		streams = append(streams, st)
	}
	cn.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	// Every stream that runs or may still run a handler is in the
	// table: one opening now sees done before it goes in, and is not
	// served (onHeaders).
	for _, st := range streams {
		st.abort(err)
	}
	return true
}

// startDrain sends GOAWAY naming the last stream opened: those finish,
// later ones are not served, and the connection closes once none is open.
func (cn *conn) startDrain() {
	if d, ok := cn.markDrain(); ok {
		d.send()
	}
}

// drain is a connection that refuses new streams and has yet to say so.
type drain struct {
	cn   *conn
	last uint32 // the last stream it serves
	idle bool   // none is open: it closes after the GOAWAY
}

// markDrain makes the connection refuse every stream after the last one
// read; ok is false when it drains already, is closed, or has yet to
// write its SETTINGS (it drains once they are out).
func (cn *conn) markDrain() (d drain, ok bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.markDrainLocked()
}

func (cn *conn) markDrainLocked() (d drain, ok bool) {
	if cn.goaway || cn.done {
		return drain{}, false
	}
	if !cn.settled {
		// SETTINGS must be the first frame (RFC 9113 §3.4).
		cn.drainLater = true
		return drain{}, false
	}
	cn.goaway, cn.goneAt = true, cn.lastID
	return drain{cn, cn.lastID, cn.handlers == 0}, true
}

// send writes the GOAWAY, or leaves it to a write in progress.
func (d drain) send() {
	d.cn.gmu.Lock()
	d.queue()
	d.cn.gmu.Unlock()
	d.cn.pushControl()
	if d.idle {
		d.cn.closeSoon()
	}
}

// queue queues the GOAWAY, under gmu; pushControl sends it.
func (d drain) queue() {
	last := d.last
	d.cn.queueControl(func(w *http2.Framer) error { return w.WriteGoAway(last, http2.ErrCodeNo, nil) })
}

// goAwayGracefully has the connection go away without refusing a stream
// the client has in flight (RFC 9113 §6.8): a GOAWAY naming 2^31-1 tells
// it to open no more and refuses none, and a PING follows it; once the
// client has answered the PING, every stream it opened before it read
// the GOAWAY has been read, and startDrain names the last of them, the
// connection closing once they are answered. A client that does not
// answer within graceWait is sent the last stream then. A GOAWAY naming
// the last stream read at once (startDrain) refuses the streams that
// cross it: a client may send those again elsewhere, but not one whose
// body it has streamed. A drain begun meanwhile names the last stream at
// once, as it would have.
func (cn *conn) goAwayGracefully() {
	cn.gmu.Lock()
	cn.mu.Lock()
	if !cn.settled {
		// No stream is open yet: the drain waits for the SETTINGS, as
		// markDrain's does.
		cn.drainLater = true
		cn.mu.Unlock()
		cn.gmu.Unlock()
		return
	}
	if cn.goaway || cn.graceful || cn.done {
		cn.mu.Unlock()
		cn.gmu.Unlock()
		return
	}
	cn.graceful = true
	cn.graceTimer = time.AfterFunc(graceWait, func() { cn.endGrace() })
	cn.mu.Unlock()
	cn.queueControl(func(w *http2.Framer) error {
		if err := w.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil); err != nil {
			return err
		}
		return w.WritePing(false, [8]byte([]byte(gracePing)))
	})
	cn.gmu.Unlock()
	cn.pushControl()
}

// gracePing is the payload of goAwayGracefully's PING; graceWait bounds
// the wait for its answer, which takes a client one round trip.
const (
	gracePing = "h2-grace"
	graceWait = time.Second
)

// endGrace ends goAwayGracefully's wait: the GOAWAY naming the last
// stream goes out. It reports whether the connection was waiting.
func (cn *conn) endGrace() bool {
	cn.gmu.Lock()
	cn.mu.Lock()
	on := cn.graceful
	cn.graceful = false
	var d drain
	ok := false
	if on {
		cn.graceTimer.Stop()
		// In the same hold of mu that ends the grace: between the two,
		// goAwayGracefully (a handler's Connection: close) found neither
		// and began a second grace, a second GOAWAY 2^31-1 and PING.
		d, ok = cn.markDrainLocked()
	}
	cn.mu.Unlock()
	if ok {
		d.queue()
	}
	cn.gmu.Unlock()
	if ok {
		cn.pushControl()
	}
	if ok && d.idle {
		cn.closeSoon()
	}
	return on
}

// closeSoon closes a connection that has sent GOAWAY and has no stream
// left, after a moment in which the client can read the GOAWAY and stop
// opening streams. A stream that started meanwhile (read before the
// GOAWAY, so promised an answer) keeps it open: its end calls closeSoon
// again, as does one still being built (opening) when the moment ends:
// its handler's end, or notOpened. The reading goroutine closes it
// (wakeToEnd), lingering: a client still reading the last response sends
// WINDOW_UPDATEs as it does, and those reaching a closed socket have it
// send a reset, which drops the response's tail and the GOAWAY.
func (cn *conn) closeSoon() {
	time.AfterFunc(50*time.Millisecond, func() {
		cn.mu.Lock()
		busy := cn.handlers > 0 || cn.opening
		cn.mu.Unlock()
		if !busy {
			cn.wakeToEnd()
		}
	})
}

// wakeToEnd has the reading goroutine end the connection: its read fails
// at once (a deadline passed), and serve's end lingers. A reader stuck
// writing (control frames to a client that reads none) fails within the
// linger's bound instead, and closes the connection, as it was before.
func (cn *conn) wakeToEnd() {
	_ = cn.c.SetWriteDeadline(time.Now().Add(lingerFor))
	cn.closing.Store(true)
	_ = cn.c.SetReadDeadline(longAgo)
}

// setReadDeadline sets the reader's deadline, which never hides
// wakeToEnd's: whichever sets its own last, the deadline ends as passed.
func (cn *conn) setReadDeadline(t time.Time) {
	_ = cn.c.SetReadDeadline(t)
	if cn.closing.Load() {
		_ = cn.c.SetReadDeadline(longAgo)
	}
}

// longAgo is a deadline passed.
var longAgo = time.Unix(1, 0)

// armIdle starts the idle timeout's count when no stream is open. The
// timer is not stopped when a stream opens and reset when the last one
// ends (two runtime timer operations a request, on a connection with one
// stream at a time): it stays pending, and when it fires early (while
// streams run, or before IdleTimeout has passed since idleSince) it waits
// out the rest, or stays off until the connection is idle again, as
// package deadline's timer does for HTTP/1.1.
func (cn *conn) armIdle() {
	t := cn.s.opts.IdleTimeout
	if t <= 0 {
		return
	}
	now := time.Now()
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.done || cn.handlers > 0 {
		return
	}
	cn.idleSince = now
	switch {
	case cn.idlePending: // it fires, and waits out the rest
	case cn.idleTimer == nil:
		cn.idleTimer, cn.idlePending = time.AfterFunc(t, cn.onIdle), true
	default:
		cn.idleTimer.Reset(t)
		cn.idlePending = true
	}
}

func (cn *conn) onIdle() {
	now := time.Now()
	cn.mu.Lock()
	cn.idlePending = false
	if cn.handlers > 0 || cn.done {
		cn.mu.Unlock()
		return // the last stream's end arms it again
	}
	if left := cn.s.opts.IdleTimeout - now.Sub(cn.idleSince); left > 0 {
		cn.idleTimer.Reset(left)
		cn.idlePending = true
		cn.mu.Unlock()
		return
	}
	cn.mu.Unlock()
	cn.startDrain()
}

// bufWriter is the connection's write buffer, taken from the server's
// pool while frames are written and given back at each flush, so that an
// idle connection holds none (net/http's HTTP/2 server does the same).
type bufWriter struct {
	c    net.Conn
	pool *sync.Pool
	bw   *bufio.Writer
}

const writeBuf = 16<<10 + 512 // a full DATA frame and a header block

func (b *bufWriter) get() *bufio.Writer {
	if b.bw == nil {
		if v, ok := b.pool.Get().(*bufio.Writer); ok {
			v.Reset(b.c)
			b.bw = v
		} else {
			b.bw = bufio.NewWriterSize(b.c, writeBuf)
		}
	}
	return b.bw
}

func (b *bufWriter) Write(p []byte) (int, error) { return b.get().Write(p) }

func (b *bufWriter) Buffered() int {
	if b.bw == nil {
		return 0
	}
	return b.bw.Buffered()
}

func (b *bufWriter) Flush() error {
	if b.bw == nil {
		return nil
	}
	err := b.bw.Flush()
	b.release()
	return err
}

func (b *bufWriter) release() {
	if b.bw != nil {
		b.bw.Reset(nil)
		b.pool.Put(b.bw)
		b.bw = nil
	}
}
