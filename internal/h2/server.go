package h2

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/workers"
)

// Options configure a Server. Handler is required.
type Options struct {
	// Handler serves every request. Once it has returned, neither it nor
	// a goroutine it left behind may use the request's header map
	// (r.Header) or the response's (w.Header() as it was before the
	// return): the server clears both and reuses them for later streams.
	// net/http lets a handler read r.Header after it returns; this server
	// does not.
	Handler http.Handler
	// Server is what a request's context carries under
	// http.ServerContextKey, as net/http's would. Optional.
	Server *http.Server
	// RequestContext, when set, returns the context a request is served
	// with, made from a parent that carries the connection's values and
	// ends with the stream; the handler gets exactly what it returns.
	// Optional.
	RequestContext func(conn context.Context) context.Context
	// RequestDone, when set, is given back each context RequestContext
	// made once the server no longer uses it: the handler has returned
	// and the response's head is encoded (the encoder keeps copies of
	// what it indexes). The maker may then reuse it, if nothing the
	// handler left behind can use it, and reports whether that is so:
	// nothing the handler left can reach the request, its writer or its
	// context. The server then reuses the stream the request lived in
	// (a request without a body) for the connection's next one. Not
	// called after a panic. Optional.
	RequestDone func(ctx context.Context) bool
	// ReadHeaderTimeout bounds the client's preface and first SETTINGS,
	// and a header block split over CONTINUATION frames. Zero: none.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a connection (GOAWAY first) that has had no open
	// stream for this long. Zero: never.
	IdleTimeout time.Duration
	// BodyStall fails a request body's Read that has waited this long
	// for the client's next DATA (a timeout net.Error; the handler's
	// answer or the stream's reset follows as for any body error): a
	// client that stalls its upload would otherwise hold the handler, and
	// the host behind it, for ever. Zero: no bound.
	BodyStall time.Duration
	// WriteStall resets a stream whose response has waited this long at
	// once for the client's flow-control window. Zero: no bound.
	// A write the connection itself does not take is the net.Conn's to
	// bound (a write deadline).
	WriteStall time.Duration
	// MaxHeaderBytes bounds a request's header list, as
	// http.Server.MaxHeaderBytes does (plus HTTP/2's 32 bytes a field for
	// ten fields, as net/http pads it); over it the request gets 431.
	// Zero: http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConcurrentStreams is advertised and enforced per connection.
	// Zero: 250, net/http's default.
	MaxConcurrentStreams uint32
	// TooLarge answers a request whose header list is over the bound
	// (with a 431). Optional: a plain 431.
	TooLarge http.Handler
	Logger   *slog.Logger

	// peekEvery paces the watcher's looks at the sockets of connections
	// running a handler inline, and inlineMax bounds such a handler's time
	// on the reading goroutine (see inline.go). Zero: defaultPeekEvery,
	// defaultInlineMax; set by tests.
	peekEvery, inlineMax time.Duration
}

// Defaults and bounds.
const (
	defaultMaxStreams = 250
	// streamWindow and connWindow are the receive windows advertised: a
	// stream's (SETTINGS_INITIAL_WINDOW_SIZE) and the connection's. A
	// stream's upload that its handler does not read (a host that does
	// not take it, the request held open) keeps its part of the
	// connection's window until it is read or dropped: with a connection
	// window no larger than a stream's (net/http's, 1 MiB each), one such
	// stream left every other stream on the connection unable to send a
	// byte, and BodyStall failed their uploads. Four streams' windows:
	// three such streams leave the others a stream's window. A stream's
	// is net/http's, so that one upload goes as fast as before (a
	// stream's window a round trip). The windows are filled only by
	// clients that send, and buffers are taken as DATA comes: what a
	// connection holds of uploads no handler has read is at most
	// connWindow.
	streamWindow = 1 << 20
	connWindow   = 4 * streamWindow
	maxFrameRead = 16 << 10
	// maxFrameWrite caps the frames written, whatever larger size the
	// client allows: the framer's buffer grows to the largest frame it
	// ever wrote and keeps it for the connection's life (16 MiB for a
	// client that allows that and downloads a large file), while frames
	// over 16 KiB save nothing worth it (nginx writes 8 KiB).
	maxFrameWrite = 16 << 10
	// maxRefusals is how many streams over the limit a connection may
	// open between two streams that start before it is told to go away:
	// a client that honours SETTINGS meets few (only while the handler of
	// a stream it reset still runs); the rapid reset attack meets them
	// all. Not over the connection's lifetime: a long-lived client that
	// cancels now and then would add up to the bound.
	maxRefusalsPerStream = 4
	// maxEmptyFrames bounds frames that carry nothing and cost a wake-up
	// each (empty DATA, unknown types, PRIORITY, SETTINGS and their
	// ACKs, PING ACKs, refused header blocks and frames, resets of closed
	// streams, WINDOW_UPDATEs and PINGs past their allowances:
	// windowUpdatesFree, pingsFree)
	// per connection between two requests that start, or
	// within emptyWindow: a rate, so that a client pinging now and then
	// along one long stream (a keepalive) is never counted as a flood.
	maxEmptyFrames = 1000
	emptyWindow    = time.Second
	// windowUpdatesFree and windowUpdatesPerData bound the WINDOW_UPDATEs
	// a client sends, on any stream, over the connection's life: past a
	// hundred and ten for each DATA frame written, each counts as a frame
	// without progress. A client's updates follow the DATA it reads, on a
	// stream the server has ended too (Go's client sends one for the
	// stream and one for the connection each 4 KiB it reads: eight for a
	// 16 KiB frame; nghttp2 and browsers one per half window), plus a few
	// ahead of any (a larger window at the start). Unbounded, a client may
	// send 1-byte updates, each a frame's parse and a lock, for as long as
	// it likes while the server sends nothing (CVE-2019-9511..9518's
	// family). Envoy's default is the same ten a DATA frame
	// (max_inbound_window_update_frames_per_data_frame_sent).
	windowUpdatesFree    = 100
	windowUpdatesPerData = 10
	// pingsFree and pingsPerData do the same for PINGs: past a hundred
	// and two for each DATA frame written, each counts as a frame
	// without progress. gRPC's clients estimate the bandwidth-delay
	// product with a PING whenever DATA comes and none of theirs is
	// unanswered: one a round trip along a stream of small messages,
	// thousands a second on a fast link, all through one long stream
	// that starts no request to clear the count. Counted one by one,
	// such a client was told to go away mid-stream. A flood of PINGs
	// with no DATA going out is counted past the hundred, as before.
	pingsFree    = 100
	pingsPerData = 2
	// maxSettings bounds the settings in one SETTINGS frame, as x/net's
	// server does: a client sends a handful (RFC 9113 defines six).
	maxSettings = 100
	// maxControlQueue bounds the control frames queued while a handler
	// holds the write lock; past it the reader waits for the lock. A
	// batch taken from the queue is written with the queue's lock let
	// go (conn.cout), so up to twice this may be held, and the GOAWAYs'
	// senders, which never wait, add a few frames past it.
	maxControlQueue = 64 << 10
	// keepControlBuf is the largest buffer the control queue keeps once
	// sent: a few frames' worth, for the usual ACK or WINDOW_UPDATE.
	keepControlBuf = 4 << 10
)

// Server serves HTTP/2 connections given to ServeConn. Safe for
// concurrent use.
type Server struct {
	opts     Options
	log      *slog.Logger
	maxList  uint32
	handlers *workers.Pool[*stream]
	readers  *workers.Pool[*conn] // take over a connection's reading from an inline handler
	wg       sync.WaitGroup       // the handlers' goroutines, the readers' and the watcher

	// The connections that have run a handler inline, for the watcher
	// (see inline.go); watchOn says it runs (set under imu); epoch counts
	// its ticks. quit, closed by Close, stops it.
	imu     sync.Mutex
	inl     []*conn
	watchOn atomic.Bool
	quit    chan struct{}
	quitted bool
	epoch   atomic.Uint64

	mu       sync.Mutex
	conns    map[*conn]struct{}
	zero     chan struct{} // closed while no connection is served
	draining bool
	closed   bool
	sends    sync.WaitGroup // Shutdown's GOAWAY writes (Close waits for them)

	date httpwire.Date
	bufs sync.Pool // *bufWriter's buffers

	// What ended streams give back for later ones (stream.recycle): their
	// header maps, cleared, and their response's buffers. A pool, not a
	// connection's own: an idle connection holds none of it.
	headers sync.Pool // http.Header
	outs    sync.Pool // *outBufs
	bodies  sync.Pool // *[]byte: request bodies' buffers (reqBody.drop)
	fields  sync.Pool // *[]hpack.HeaderField: decoded request header blocks (blockReader)
}

// maxKeptFields bounds the header maps kept for reuse: a map keeps the
// room it grew to, and clear costs that room at every reuse.
const maxKeptFields = 32

// header returns an empty header map: one an ended stream gave back, or a
// new one with room for n fields.
func (s *Server) header(n int) http.Header {
	if h, ok := s.headers.Get().(http.Header); ok {
		return h
	}
	return make(http.Header, n)
}

// putHeader clears h and keeps it for a later stream; the caller
// guarantees nothing uses h any more (see stream.recycle).
func (s *Server) putHeader(h http.Header) {
	if h == nil || len(h) > maxKeptFields {
		return
	}
	clear(h)
	s.headers.Put(h)
}

// bodyBuf returns a handle on an empty buffer for a request body: one an
// ended stream's body gave back, or a new handle on none.
func (s *Server) bodyBuf() *[]byte {
	if h, ok := s.bodies.Get().(*[]byte); ok {
		return h
	}
	return new([]byte)
}

// putBodyBuf keeps buf for a later stream's body, in h (new if nil);
// the caller guarantees nothing uses buf any more. A large one goes, as
// a drained body lets it go (keepBodyBuf).
func (s *Server) putBodyBuf(h *[]byte, buf []byte) {
	if cap(buf) == 0 || cap(buf) > keepBodyBuf {
		return
	}
	if h == nil {
		h = new([]byte)
	}
	*h = buf[:0]
	s.bodies.Put(h)
}

// New validates o. It starts nothing.
func New(o Options) (*Server, error) {
	if o.Handler == nil {
		return nil, errors.New("h2: Handler is required")
	}
	if o.ReadHeaderTimeout < 0 || o.IdleTimeout < 0 || o.WriteStall < 0 || o.BodyStall < 0 || o.MaxHeaderBytes < 0 {
		return nil, errors.New("h2: timeouts and MaxHeaderBytes must not be negative")
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = defaultMaxStreams
	}
	if o.Server == nil {
		o.Server = &http.Server{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.peekEvery == 0 {
		o.peekEvery = defaultPeekEvery
	}
	if o.inlineMax == 0 {
		o.inlineMax = defaultInlineMax
	}
	n := o.MaxHeaderBytes
	if n == 0 {
		n = http.DefaultMaxHeaderBytes
	}
	s := &Server{opts: o, log: o.Logger, maxList: uint32(n + 10*32), conns: map[*conn]struct{}{}, zero: make(chan struct{}), quit: make(chan struct{})}
	close(s.zero)
	s.handlers = workers.New(&s.wg, workers.DefaultMaxIdle, workers.DefaultIdleFor, (*stream).serve)
	s.readers = workers.New(&s.wg, workers.DefaultMaxIdle, workers.DefaultIdleFor, (*conn).readOn)
	return s, nil
}

// ServeConn serves c, an established connection whose client speaks
// HTTP/2 (ALPN h2). It owns c and closes it. It returns when c ends, or
// earlier once an inline handler has moved c's reading to one of the
// server's own goroutines (inline.go); Shutdown and Close wait for c
// either way.
func (s *Server) ServeConn(c net.Conn) {
	cn := newConn(s, c)
	if !s.add(cn) {
		_ = c.Close()
		return
	}
	cn.serve()
}

func (s *Server) add(cn *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if len(s.conns) == 0 {
		s.zero = make(chan struct{})
	}
	s.conns[cn] = struct{}{}
	if s.draining {
		cn.startDrain()
	}
	return true
}

func (s *Server) remove(cn *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, cn)
	if len(s.conns) == 0 {
		close(s.zero)
	}
}

// Shutdown sends every connection GOAWAY and waits until their streams
// have ended and they are closed, or ctx ends. A connection closes up to
// lingerFor after its last stream, reading out what the client still
// sends (conn.linger); Close cuts that short, and so does ctx's end:
// those connections have answered every stream, and what is still open
// when Shutdown returns is then only what has something unanswered (the
// edge logs those as cut by drain_timeout). A GOAWAY whose write is stuck
// on a client that reads nothing does not hold it past ctx: Close ends
// that write.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	// Every connection refuses new streams before any GOAWAY is written:
	// a client that has read one cannot then open a stream on another
	// connection that is still served, and a write stuck on one client
	// (a full send buffer) holds back no other's refusals.
	drains := make([]drain, 0, len(s.conns))
	for cn := range s.conns {
		if d, ok := cn.markDrain(); ok {
			drains = append(drains, d)
		}
	}
	zero := s.zero
	// Each GOAWAY is written on a goroutine of its own: a connection
	// whose socket takes no more (a client that reads nothing) holds the
	// GOAWAY's write until it fails, and Shutdown must neither wait past
	// ctx for that nor hold back the other connections' GOAWAYs behind
	// it.
	// Added under mu unless closed, so that Close's wait for them
	// follows every Add.
	if !s.closed {
		s.sends.Add(len(drains))
		for _, d := range drains {
			go func() { defer s.sends.Done(); d.send() }()
		}
	}
	s.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		// Closed outside mu, which a connection's end (remove) takes.
		s.mu.Lock()
		conns := make([]*conn, 0, len(s.conns))
		for cn := range s.conns {
			conns = append(conns, cn)
		}
		s.mu.Unlock()
		for _, cn := range conns {
			cn.endLinger()
		}
		return ctx.Err()
	}
}

// Close closes every connection at once and waits for their handlers to
// return. No connection is served after it. A TLS connection's socket is
// closed beneath TLS, with no close_notify: one to a client that reads
// nothing would wait (conn.cut).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for cn := range s.conns {
		cn.cut()
	}
	zero := s.zero
	s.mu.Unlock()
	<-zero
	s.sends.Wait() // their connections are closed: their writes failed
	s.imu.Lock()
	if !s.quitted {
		s.quitted = true
		close(s.quit)
	}
	s.imu.Unlock()
	s.handlers.Stop()
	s.readers.Stop()
	s.wg.Wait()
	return nil
}

// Started is how many goroutines have been started to run handlers; they
// are reused, so under a steady load it stays put.
func (s *Server) Started() int64 { return s.handlers.Started() }

// IdleHandlers is how many handler goroutines wait for a request.
func (s *Server) IdleHandlers() int { return s.handlers.Idle() }

var errServerClosed = errors.New("h2: server closed")
