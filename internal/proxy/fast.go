package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/gatehouse-dev/gatehouse/internal/deadline"
	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// The fast path. The common request — GET or HEAD, no body, no upgrade,
// to a plain-http host — is sent by the proxy itself, on the handler's
// goroutine, over its own keep-alive pool: no request clone, no transport
// goroutines to hand the request and response between, and the response
// head parsed straight into the client's header map (one string and one
// []string for all its values). Everything else (bodies, upgrades,
// trailers requested with TE, https and h2c hosts, a host URL with a
// path) goes through httputil.ReverseProxy as before.
//
// It sends what the ReverseProxy path sends, header for header: the
// request line and Host, the client's headers less the hop-by-hop ones
// (X-Forwarded-For/Host/Proto and Forwarded as hygiene left them), no
// User-Agent unless the client sent one, and the context headers; and it
// answers as that path does: 1xx responses forwarded, hop-by-hop response
// headers removed, X-Gatehouse-Cluster stamped, trailers passed on,
// streams (event-stream or unknown length) flushed on every write, the
// same errors for the same failures (a connect failure is a dial
// *net.OpError, a slow head a timeout), and a broken body aborting the
// response with http.ErrAbortHandler.

// fastPool is the fast path's keep-alive pool: per host address, a
// stack of idle connections (no lock shared across hosts), the most
// recently used on top. Reusing the most recent one (as nginx's upstream
// keepalive and Go's http.Transport do) keeps the fewest connections
// busy: under a load that needs only some of them the rest stay idle long
// enough to be closed, and the ones in use are warm in both processes'
// caches. A connection idle for idleFor is closed by the next get that
// finds it or by a sweep, a timer func armed while idle connections exist
// (no goroutine of its own), so that hosts gone from the table leave no
// open sockets behind, and a host's stack left empty and untouched for
// idleFor is dropped, so that they leave no entry either (hosts replaced
// on new addresses would otherwise grow the map, and every sweep's scan,
// without bound).
type fastPool struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	now     func() time.Time
	max     int
	idleFor time.Duration
	hosts   sync.Map // addr -> *idleConns; a dropped one is dead, see put
	closed  atomic.Bool

	armed atomic.Bool // a sweep is scheduled
	mu    sync.Mutex  // guards sweep (the timer)
	sweep *time.Timer

	// readers are the connections' read buffers, held only while a
	// connection is in use: an idle one holds none.
	readers sync.Pool // *bufio.Reader of readSize
}

// idleConns is one host's idle connections, oldest first.
type idleConns struct {
	addr  string
	mu    sync.Mutex
	conns []*fconn
	// last is when a get last looked here or the stack was made; dead is
	// set, once it is out of the pool's map, by the sweep that dropped
	// it. Both under mu.
	last time.Time
	dead bool
}

// take removes and returns the connections idle since before cut, and
// with all, every connection.
func (ic *idleConns) take(cut time.Time, all bool) []*fconn {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	var old []*fconn
	kept := ic.conns[:0]
	for _, c := range ic.conns {
		if all || !c.idle.After(cut) {
			old = append(old, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(ic.conns[len(kept):])
	ic.conns = kept
	return old
}

// readSize is the read buffer of a connection in use. A bigger one would
// save the second read of a 16 KiB response (measured: ~2 µs of ~50) but
// be held for the whole of a long response: an event stream keeps its
// connection, and its buffer, for hours.
const readSize = 4 << 10

type fconn struct {
	net.Conn
	br      *bufio.Reader // nil while idle in the pool
	readers *sync.Pool    // where br goes back
	wb      bytes.Buffer  // the request head, sent in one write
	text    []byte        // the response head's values as read (fastResp.text)
	idle    time.Time     // when it was put back
	home    *idleConns    // its host's stack in the pool, where put returns it
	reused  bool
	abort   func() // unblocks a read or write: the client went away

	// head bounds the wait for a response head with a timer that is not
	// reset per request (a read deadline set before the head and cleared
	// after it was two timer operations per request; see
	// internal/deadline). When a bound runs out it moves the read deadline
	// into the past, which fails the read as the deadline did, and the
	// connection is spent: not reused.
	head  *deadline.Timer
	spent bool

	// The client watch: see watchClient.
	client *deadline.Timer
	cmu    sync.Mutex
	cctx   context.Context // the running exchange's request context; nil between
	cstop  func() bool     // the context.AfterFunc registered for it, if any
}

// clientWait is how long an exchange runs before it starts listening for
// its request's context to end (the client left, or the server closes).
// Listening is a context.AfterFunc — an allocation, a lock and a map
// insert on the connection's context, and the same to undo — which cost
// ~2 % of a small request's CPU when every exchange did it, though almost
// every one ends sooner. A longer one (a slow host, a stream) is cut at
// most this late; the lane notices an HTTP/1.1 client gone only after
// 500 ms of a request anyway.
const clientWait = 200 * time.Millisecond

// watchClient begins the watch of ctx for the exchange about to run: once
// clientWait has passed, or at once when ctx is already done, c is
// aborted when ctx ends.
func (c *fconn) watchClient(ctx context.Context) {
	if ctx.Done() == nil {
		return
	}
	c.cmu.Lock()
	c.cctx = ctx
	c.cmu.Unlock()
	if ctx.Err() != nil {
		c.listen()
		return
	}
	if c.client == nil {
		c.client = deadline.New(c.listen)
	}
	c.client.Start(clientWait)
}

// listen registers the abort for the running exchange's context. It may
// run late, for an exchange already over (the timer fired as it ended):
// then there is none, or the next one's, whose end undoes it.
func (c *fconn) listen() {
	c.cmu.Lock()
	if c.cctx != nil && c.cstop == nil {
		c.cstop = context.AfterFunc(c.cctx, c.abort)
	}
	c.cmu.Unlock()
}

// unwatchClient ends the watch. It reports false when the context's end
// aborted c: its deadline is in the past, so it is not reused.
func (c *fconn) unwatchClient() bool {
	if c.client != nil {
		c.client.End()
	}
	c.cmu.Lock()
	stop := c.cstop
	c.cctx, c.cstop = nil, nil
	c.cmu.Unlock()
	return stop == nil || stop()
}

// startHead begins the wait for a response head, bounded by t from now.
func (c *fconn) startHead(t time.Duration) {
	if c.head == nil {
		c.head = deadline.New(func() { _ = c.SetReadDeadline(aLongTimeAgo) })
	}
	c.head.Start(t)
}

// endHead ends the wait for the head. It reports false when the timeout
// cut it: the read deadline is in the past, whatever was read.
func (c *fconn) endHead() bool {
	if c.head != nil && c.head.End() {
		c.spent = true
	}
	return !c.spent
}

// Close closes the connection and stops its timer. Only the
// connection's user closes one it holds, so its buffer can go back.
func (c *fconn) Close() error {
	if c.head != nil {
		c.head.Stop()
	}
	if c.client != nil {
		c.client.Stop()
	}
	c.release()
	return c.Conn.Close()
}

// take gives c a read buffer for its turn in use.
func (c *fconn) take() {
	br, _ := c.readers.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(nil, readSize)
	}
	br.Reset(c.Conn)
	c.br = br
}

// release gives c's read buffer back; c holds none after it.
func (c *fconn) release() {
	if c.br == nil {
		return
	}
	c.br.Reset(nil)
	if c.readers != nil {
		c.readers.Put(c.br)
	}
	c.br = nil
}

// idle returns addr's stack, made at now if there is none.
func (fp *fastPool) idle(addr string, now time.Time) *idleConns {
	if v, ok := fp.hosts.Load(addr); ok {
		return v.(*idleConns)
	}
	v, _ := fp.hosts.LoadOrStore(addr, &idleConns{addr: addr, last: now})
	return v.(*idleConns)
}

// get returns the most recently used idle connection to addr, or dials
// one. Below a stale connection every one is older, so all of them go.
func (fp *fastPool) get(ctx context.Context, addr string, now time.Time, fresh bool) (*fconn, error) {
	if !fresh {
		ic := fp.idle(addr, now)
		ic.mu.Lock()
		ic.last = now // a dead stack is empty: then a dial, homed anew below
		var c *fconn
		var stale []*fconn
		if n := len(ic.conns); n > 0 {
			c = ic.conns[n-1]
			ic.conns[n-1] = nil
			ic.conns = ic.conns[:n-1]
			if now.Sub(c.idle) >= fp.idleFor {
				stale = append(ic.conns, c) // ic.conns' array: closed below, outside the lock
				ic.conns, c = nil, nil
			}
		}
		ic.mu.Unlock()
		for _, s := range stale {
			_ = s.Close()
		}
		if c != nil {
			c.reused = true
			c.take()
			return c, nil
		}
	}
	conn, err := fp.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn = sock.Wrap(conn)
	c := &fconn{Conn: conn, readers: &fp.readers, home: fp.idle(addr, now)}
	c.take()
	c.abort = func() { _ = c.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// put keeps c for reuse on its host's stack, or closes it when the pool
// is full or closed, or when the host sent more than its response (bytes
// no request asked for would be read as the next response).
func (fp *fastPool) put(c *fconn, now time.Time) {
	if fp.closed.Load() || c.br.Buffered() > 0 {
		_ = c.Close()
		return
	}
	c.release()
	c.idle = now
	ic := c.home
	ic.mu.Lock()
	for ic.dead {
		// A sweep dropped c's stack while c was out (a stream longer
		// than idleFor): c goes on its host's stack now, which a sweep
		// cannot drop before this put has locked it and sees c on it.
		ic.mu.Unlock()
		ic = fp.idle(ic.addr, now)
		c.home = ic
		ic.mu.Lock()
	}
	// closed again under the lock: a closeIdle that began since the check
	// above has either taken this stack already or will find c on it.
	kept := len(ic.conns) < fp.max && !fp.closed.Load()
	if kept {
		ic.conns = append(ic.conns, c)
	}
	ic.mu.Unlock()
	if !kept {
		_ = c.Close()
		return
	}
	if fp.armed.CompareAndSwap(false, true) {
		fp.arm()
	}
}

// arm schedules a sweep idleFor from now, unless the pool is closed.
func (fp *fastPool) arm() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.closed.Load() {
		return
	}
	if fp.sweep == nil {
		fp.sweep = time.AfterFunc(fp.idleFor, fp.sweepIdle)
	} else {
		fp.sweep.Reset(fp.idleFor)
	}
}

// sweepIdle closes the connections idle for idleFor or more, drops the
// stacks left empty that no get has looked at for idleFor, and arms the
// next sweep while any stack remains.
//
// A stack is dropped under its lock, and marked dead there: a get that
// found it before finds it empty and dials, and a put to it (its
// connection was out) takes its host's current stack instead (put). So
// no connection is put on a stack the map no longer holds, where it
// would stay open and unswept.
func (fp *fastPool) sweepIdle() {
	cut := fp.now().Add(-fp.idleFor)
	left := false
	fp.hosts.Range(func(k, v any) bool {
		ic := v.(*idleConns)
		for _, c := range ic.take(cut, fp.closed.Load()) {
			_ = c.Close()
		}
		ic.mu.Lock()
		if len(ic.conns) == 0 && !ic.last.After(cut) {
			ic.dead = true
			fp.hosts.CompareAndDelete(k, ic)
		} else {
			left = true
		}
		ic.mu.Unlock()
		return true
	})
	fp.armed.Store(false)
	if left && fp.armed.CompareAndSwap(false, true) {
		fp.arm()
	}
}

// closeIdle closes every idle connection; with stop, later puts close too.
func (fp *fastPool) closeIdle(stop bool) {
	if stop {
		fp.closed.Store(true)
		fp.mu.Lock()
		if fp.sweep != nil {
			fp.sweep.Stop()
		}
		fp.mu.Unlock()
	}
	fp.hosts.Range(func(_, v any) bool {
		for _, c := range v.(*idleConns).take(time.Time{}, true) {
			_ = c.Close()
		}
		return true
	})
}

// fastOK reports whether r and h can take the fast path.
func fastOK(r *http.Request, h *route.Host) bool {
	// No body is ContentLength 0, whatever r.Body is: ReverseProxy sends
	// none then either, and net/http's HTTP/2 server gives every request
	// a Body, a bodiless GET included.
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) ||
		r.ContentLength != 0 || len(r.TransferEncoding) > 0 || r.Trailer != nil {
		return false
	}
	u := h.URL
	if u.Scheme != "http" || h.Scheme == "h2c" || u.Path != "" || u.RawPath != "" || u.RawQuery != "" || u.Opaque != "" || u.User != nil || u.ForceQuery {
		return false
	}
	for i := 0; i < len(r.Host); i++ {
		if r.Host[i] >= 0x80 {
			return false // net/http's client would send it in punycode
		}
	}
	if r.URL.Opaque != "" || strings.HasPrefix(r.URL.Path, "//") || !cleanQuery(r.URL.RawQuery) {
		return false
	}
	hd := r.Header
	if _, ok := hd["Upgrade"]; ok {
		return false
	}
	if _, ok := hd["Te"]; ok {
		return false
	}
	for _, v := range hd["Connection"] { // only keep-alive/close: no header is named hop-by-hop
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if tok = textproto.TrimString(tok); tok != "" && !strings.EqualFold(tok, "keep-alive") && !strings.EqualFold(tok, "close") {
				return false
			}
		}
	}
	return true
}

// cleanQuery reports whether ReverseProxy would pass the query as is (its
// cleanQueryParams re-encodes one with a ';' or a bad escape).
func cleanQuery(s string) bool {
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 3
		default:
			i++
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipOut reports the request headers the fast path does not copy: hop-by-hop
// ones, those written separately, and the context headers (written from
// the attempt). Forwarded is copied: hygiene left only a trusted proxy's.
func skipOut(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Host", "Content-Length", "User-Agent",
		HeaderAppID, HeaderClientIP, HeaderCluster, HeaderRequestID, HeaderSubject, HeaderScopes:
		return true
	}
	return false
}

var (
	errFastHead     = errors.New("proxy: malformed response head from the host")
	errFastTooMany  = errors.New("proxy: too many 1xx responses")
	errFastHeadSize = errors.New("proxy: response head from the host too large")
	// errFastFraming is a head with both Content-Length and
	// Transfer-Encoding, on every HTTP/1 path to a host. RFC 9112 §6.3
	// lets a recipient read it as chunked, and net/http's client does, and
	// reuses the connection; but it is what a response split looks like,
	// and nginx refuses it (502, "upstream sent "Content-Length" and
	// "Transfer-Encoding" headers at the same time"): a host whose server
	// and the gateway disagree on where its answer ends would have the
	// rest read as the next client's answer.
	errFastFraming = fmt.Errorf("%w: both Content-Length and Transfer-Encoding", errFastHead)
	// errFieldSpace is a head with white space in a field's name, before
	// its colon, on every HTTP/1 path to a host. RFC 9112 §5.1 has a
	// proxy remove it; net/http's client keeps such a name as another
	// field, so "Content-Length : 7" framed nothing and the body was read
	// to the close, which a host's server that reads the field as the
	// length (nginx answers 502) ends elsewhere: the rest is the next
	// answer on its side. No honest server writes one.
	errFieldSpace = fmt.Errorf("%w: white space before a field's colon", errFastHead)
	// errStatusLine is a status line statusLine refuses, on every HTTP/1
	// path to a host.
	errStatusLine = fmt.Errorf("%w: a status line not HTTP/1.x, a space and three digits", errFastHead)
	aLongTimeAgo  = time.Unix(1, 0)
)

// statusLine reads a host's status line (without its line end) as every
// HTTP/1 path does: RFC 9112 §4's "HTTP/1." and a digit, one space, three
// digits, and then nothing or a space and the reason (a server that
// leaves out the reason's space is taken). A minor version past 1 is
// read as 1.1 (RFC 9112 §2.3), as net/http's client reads it. What the
// grammar does not allow is refused, though net/http's client takes it:
// spaces before the code (a recipient MAY read them as one, and "lenient
// parsing can result in response splitting", §4), another major version
// ("HTTP/2.0" in HTTP/1.1's framing), a sign before the code.
func statusLine(line []byte) (status int, ok bool) {
	if len(line) < len("HTTP/1.1 200") || string(line[:7]) != "HTTP/1." || !isDigit(line[7]) || line[8] != ' ' ||
		len(line) > 12 && line[12] != ' ' {
		return 0, false
	}
	for _, d := range line[9:12] {
		if !isDigit(d) {
			return 0, false
		}
		status = status*10 + int(d-'0')
	}
	return status, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// serveFast is one attempt of the fast path at a.host, answering w like
// p.rp.ServeHTTP would (errors through p.errorHandler). r's context is
// a's parent: only an error needs the request with a as its context.
func (p *Proxy) serveFast(w http.ResponseWriter, r *http.Request, a *attempt) {
	ctx := r.Context()
	// Connections are kept per address dialed (the fast path is plain
	// http: nothing on them names the host), and that is the one that
	// passed the host's challenge, never its name resolved again.
	addr := a.host.URL.Host
	if a.host.Dial != "" {
		addr = a.host.Dial
	}
	fresh := false
	now := a.picked // Options.Now's reading, for the pool's idle times
	for {
		c, err := p.fast.get(ctx, addr, now, fresh)
		if err != nil {
			p.errorHandler(w, a.request(r), err)
			return
		}
		retry, err := p.exchangeFast(w, r, a, c)
		if err == nil {
			return
		}
		_ = c.Close()
		if retry && c.reused && !fresh {
			fresh = true // a kept-alive connection the host had closed: once more, on a new one
			continue
		}
		p.errorHandler(w, a.request(r), err)
		return
	}
}

// fastResp is the parsed response head.
type fastResp struct {
	status   int
	length   int64 // -1: unknown (chunked or until close)
	chunked  bool
	close    bool
	stream   bool // flush every write
	trailers []string
	keys     [24]string
	vals     [24][2]int32 // value offsets in text
	n        int
	more     []fastKV // past 24 headers
	// text holds the values as read: scratch that the next head read
	// into the same fastResp reuses (copyTo copies what it hands out).
	text      []byte
	connToks  []string // Connection tokens other than close/keep-alive
	lengthSet bool
	began     bool // a byte of the head came, whatever failed after it
}

// smallHead and headBlock are the memory a response head's values take,
// in one allocation sized to the head: the bytes, and the []string over
// them. Most hosts' heads fit the small one (192 bytes against 768: the
// allocation is the memory a request touches fresh).
type smallHead struct {
	vals [4]string
	text [128]byte
}

type headBlock struct {
	vals [16]string
	text [512]byte
}

// headMemory returns n strings' room and size bytes, in one allocation
// when they fit a block.
func headMemory(n, size int) ([]string, []byte) {
	switch {
	case n <= 4 && size <= 128:
		b := new(smallHead)
		return b.vals[:n], b.text[:size]
	case n <= 16 && size <= 512:
		b := new(headBlock)
		return b.vals[:n], b.text[:size]
	}
	return make([]string, n), make([]byte, size)
}

type fastKV struct {
	key        string
	start, end int32
}

// exchangeFast sends in on c and copies the response to w. On an error
// nothing was written to w, and c must be closed; retry says the host
// received the request on a connection that was already dead (nothing
// came back), so it is safe to send again. It puts c back when done.
func (p *Proxy) exchangeFast(w http.ResponseWriter, in *http.Request, a *attempt, c *fconn) (retry bool, err error) {
	ctx := in.Context()
	c.watchClient(ctx)
	reuse := false
	headTimeout := p.opts.ResponseHeaderTimeout
	defer func() {
		if !c.unwatchClient() {
			reuse = false // the deadline may be poisoned
		}
		if reuse {
			p.fast.put(c, p.opts.Now())
		} else if err == nil {
			_ = c.Close()
		}
	}()
	c.wb.Reset()
	if err := p.writeFast(&c.wb, in, a); err != nil {
		return ctx.Err() == nil, err
	}
	if headTimeout > 0 {
		c.startHead(headTimeout)
	}
	// The host answers only once it has the head, so the first read
	// sends it and then waits (sock.Conn.Ask): no read that finds nothing.
	// A kept-alive connection must be idle when asked (AskIdle): bytes a
	// host sent after its last response (a body after a HEAD, 204 or
	// 304, a stray CRLF, or a whole forged response) came after put's
	// look, and would be read as the answer to this request, from
	// another client perhaps, and shift every answer after it.
	// net/http's Transport, whose connections always have a read
	// pending, drops such a connection; here one peek finds it.
	if ak, ok := c.Conn.(asker); ok && c.br.Buffered() == 0 {
		if c.reused {
			ak.AskIdle(c.wb.Bytes())
		} else {
			ak.Ask(c.wb.Bytes())
		}
	} else if _, err := c.Conn.Write(c.wb.Bytes()); err != nil {
		return ctx.Err() == nil, err
	}
	if c.wb.Cap() > maxKeptHead {
		c.wb = bytes.Buffer{} // a rare big head is not kept with the connection
	}
	res := fastResp{text: c.text}
	for n1xx := 0; ; n1xx++ {
		if err := readFastHead(c.br, &res); err != nil {
			// Nothing at all came back, or the head did not go out (no
			// timeout, the client still there): on a reused connection,
			// the host had closed it.
			// A byte of an answer means the host read the request: it is
			// never sent twice (net/http's Transport retries only when
			// its first read finds nothing).
			dead := n1xx == 0 && !res.began && ctx.Err() == nil && !isTimeout(err) && (err == io.EOF || isConnBroken(err)) &&
				!errors.Is(err, io.ErrUnexpectedEOF)
			if errors.Is(err, sock.ErrNotIdle) {
				dead = true // the request never went out: a new connection takes it
			}
			return dead, err
		}
		if res.status >= 200 || res.status == http.StatusSwitchingProtocols {
			break
		}
		if n1xx == max1xx {
			return false, errFastTooMany
		}
		h := w.Header()
		for _, k := range p.opts.OwnFields {
			res.dropKey(k) // as on the final answer: the handler's one value stands
		}
		res.copyTo(h, nil)
		w.WriteHeader(res.status)
		clear(h)
	}
	if res.status == http.StatusSwitchingProtocols {
		return false, errFastHead // no upgrade was asked for
	}
	if headTimeout > 0 && !c.endHead() {
		// The head came as the timeout ran out; the deadline is spent.
		return false, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
	}
	a.host.Health.Answered(a.picked)
	h := w.Header()
	for _, k := range p.opts.OwnFields {
		res.dropKey(k)
	}
	res.copyTo(h, p.clusterHdr)
	if cap(res.text) <= readSize {
		c.text = res.text[:0] // copyTo copied what it handed out
	}
	res.trailers = slices.DeleteFunc(res.trailers, func(k string) bool { return !trailerOK(k, p.opts.OwnFields) })
	if len(res.trailers) > 0 {
		h.Add("Trailer", strings.Join(res.trailers, ", "))
	}
	w.WriteHeader(res.status)
	if res.stream {
		flush(w) // a stream's head goes out at once, as ReverseProxy's does
	}
	noBody := in.Method == http.MethodHead || res.status == http.StatusNoContent || res.status == http.StatusNotModified
	if noBody {
		reuse = !res.close
		return false, nil
	}
	var berr error
	switch {
	case res.chunked:
		berr = copyChunked(w, c.br, res.stream, res.trailers, p.opts.OwnFields)
	case res.length >= 0:
		berr = copyN(w, c.br, res.length, res.stream)
	default:
		berr = copyN(w, c.br, -1, true)
		res.close = true
	}
	if berr != nil {
		_ = c.Close()
		reuse = false
		if in.Context().Value(http.ServerContextKey) != nil {
			panic(http.ErrAbortHandler)
		}
		return false, nil // outside a server (a test): the response just ends
	}
	reuse = !res.close
	return false, nil
}

// asker is a connection whose next read can send the request it waits
// an answer to (internal/sock, on Linux).
type asker interface {
	Ask(p []byte)
	AskIdle(p []byte)
}

// maxKeptHead bounds the head buffer a pooled connection keeps.
const maxKeptHead = 64 << 10

// writeFast writes the request head to bw, to go to the host in one
// write that can ride on the read that waits for the answer.
func (p *Proxy) writeFast(bw *bytes.Buffer, in *http.Request, a *attempt) error {
	path := in.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	_, _ = bw.WriteString(in.Method)
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(path)
	if in.URL.RawQuery != "" || in.URL.ForceQuery {
		_ = bw.WriteByte('?')
		_, _ = bw.WriteString(in.URL.RawQuery)
	}
	host := in.Host
	if host == "" {
		host = a.host.URL.Host
	}
	_, _ = bw.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = bw.WriteString(host)
	_, _ = bw.WriteString("\r\n")
	if ua := in.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		writeField(bw, "User-Agent", ua[0])
	}
	for k, vs := range in.Header {
		if skipOut(k) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vs {
			writeField(bw, k, v)
		}
	}
	rq := a.req
	writeField(bw, HeaderAppID, a.vals[0])
	if rq.ClientIP.IsValid() {
		writeField(bw, HeaderClientIP, a.vals[1])
	}
	if p.clusterHdr != nil {
		writeField(bw, HeaderCluster, p.clusterHdr[0])
	}
	if rq.ID != "" {
		writeField(bw, HeaderRequestID, a.vals[2])
	}
	if rq.Subject != "" {
		writeField(bw, HeaderSubject, rq.Subject)
	}
	if rq.Issuer != "" {
		writeField(bw, HeaderIssuer, rq.Issuer)
	}
	if len(rq.Scopes) > 0 {
		_, _ = bw.WriteString(HeaderScopes + ": ")
		for i, s := range rq.Scopes {
			if i > 0 {
				_ = bw.WriteByte(' ')
			}
			writeValue(bw, s)
		}
		_, _ = bw.WriteString("\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	return nil
}

func writeField(bw *bytes.Buffer, k, v string) {
	v = textproto.TrimString(v)
	if httpwire.IndexLineBreak(v) < 0 {
		// One append into the buffer's free room, as AvailableBuffer is
		// meant to be used.
		b := append(bw.AvailableBuffer(), k...)
		b = append(b, ": "...)
		b = append(b, v...)
		_, _ = bw.Write(append(b, "\r\n"...))
		return
	}
	_, _ = bw.WriteString(k)
	_, _ = bw.WriteString(": ")
	writeValue(bw, v)
	_, _ = bw.WriteString("\r\n")
}

// writeValue writes v with CR and LF as spaces, as net/http's client does.
func writeValue(bw *bytes.Buffer, v string) {
	for {
		i := httpwire.IndexLineBreak(v)
		if i < 0 {
			_, _ = bw.WriteString(v)
			return
		}
		_, _ = bw.WriteString(v[:i])
		_ = bw.WriteByte(' ')
		v = v[i+1:]
	}
}

// maxFastHead bounds a response head (net/http's client allows 10 MB; a
// host answering more than 1 MiB of headers gets a 502). The transports
// of the other paths take the same bound (newTransport).
const maxFastHead = 1 << 20

// readLine returns the next line of br without its line ending, valid
// until the next read. Lines longer than the reader's buffer are
// gathered in *long. On a read error it returns what came of the line.
func readLine(br *bufio.Reader, long *[]byte, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		*long = append((*long)[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(*long) > *budget {
				return nil, errFastHeadSize
			}
			line, err = br.ReadSlice('\n')
			*long = append(*long, line...)
		}
		line = *long
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return line, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, errFastHeadSize
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// What a folded line of a host's response head continues (readFastHead).
const (
	refuseFold = iota
	foldValue
	dropFold
)

// readFastHead reads one response head into res.
func readFastHead(br *bufio.Reader, res *fastResp) error {
	*res = fastResp{length: -1, text: res.text[:0]}
	budget := maxFastHead
	var long []byte
	line, err := readLine(br, &long, &budget)
	res.began = len(line) > 0 || err == nil
	if err != nil {
		return err
	}
	status, ok := statusLine(line)
	if !ok {
		return errStatusLine
	}
	res.status = status
	// RFC 9110 §15: a status code is 100-599. net/http's client takes
	// any three digits, and its server writes up to 999: a code past 599
	// would reach the client as the host sent it, which no client knows
	// how to read (and one under 100 panics the server).
	if res.status < 100 || res.status > 599 {
		return errFastHead
	}
	http10 := line[7] == '0'
	keepAlive := false
	var te bool
	// What a folded line continues: refuseFold (none yet, or a field read
	// for the framing, the connection or the trailers), foldValue (the
	// value stored last, the last bytes of res.text), dropFold (a field
	// dropped anyway).
	folds := refuseFold
	for {
		line, err = readLine(br, &long, &budget)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			// obs-fold: a proxy replaces it with a space (RFC 9112 §5.2).
			// Done as net/http's client does it for the slow path: each
			// continuation adds a space and its trimmed text, blank or
			// not, and the value loses its leading spaces (so a fold of
			// an empty value adds no space). A fold of a field read for
			// the framing, the connection or the trailers is refused.
			v := httpwire.TrimOWS(line)
			switch {
			case folds == refuseFold || !httpwire.ValidValue(v):
				return errFastHead
			case folds == dropFold:
				continue
			}
			start, end := &res.vals[res.n-1][0], &res.vals[res.n-1][1]
			if len(res.more) > 0 {
				m := &res.more[len(res.more)-1]
				start, end = &m.start, &m.end
			}
			if *end > *start {
				res.text = append(res.text, ' ')
			}
			res.text = append(res.text, v...)
			*end = int32(len(res.text))
			continue
		}
		folds = refuseFold
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			return errFastHead
		}
		kb := line[:i]
		v := httpwire.TrimOWS(line[i+1:])
		key, ok := canonicalKey(kb)
		if !ok || !httpwire.ValidValue(v) { // as net/http's client requires
			return errFastHead
		}
		if key == "" {
			return errFieldSpace
		}
		switch key {
		case "Connection":
			for _, tok := range bytes.Split(v, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				switch {
				case len(tok) == 0:
				case httpwire.EqualFold(tok, "close"):
					res.close = true
				case httpwire.EqualFold(tok, "keep-alive"):
					keepAlive = true
				default:
					res.connToks = append(res.connToks, textproto.CanonicalMIMEHeaderKey(string(tok)))
				}
			}
			continue
		case "Transfer-Encoding":
			// net/http's client refuses any coding but one "chunked", and
			// ignores the field in an HTTP/1.0 answer, whatever it says.
			if !http10 && (te || !httpwire.EqualFold(v, "chunked")) {
				return errFastHead
			}
			te = true
			continue
		case "Trailer":
			for _, tok := range bytes.Split(v, []byte(",")) {
				if tok = bytes.TrimSpace(tok); len(tok) > 0 {
					res.trailers = append(res.trailers, textproto.CanonicalMIMEHeaderKey(string(tok)))
				}
			}
			continue
		case "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade":
			folds = dropFold
			continue
		case "Content-Length":
			n, ok := httpwire.ParseLength(v)
			if !ok || (res.lengthSet && n != res.length) {
				return errFastHead
			}
			if res.lengthSet {
				continue // the same again: passed on once, as net/http's client does
			}
			res.length, res.lengthSet = n, true
		default:
			folds = foldValue
		}
		start := int32(len(res.text))
		res.text = append(res.text, v...)
		if res.n < len(res.keys) {
			res.keys[res.n], res.vals[res.n] = key, [2]int32{start, int32(len(res.text))}
			res.n++
		} else {
			res.more = append(res.more, fastKV{key, start, int32(len(res.text))})
		}
	}
	if http10 && !keepAlive {
		res.close = true
	}
	if te && res.lengthSet {
		return errFastFraming
	}
	switch {
	case te && http10:
		// Faulty framing (RFC 9112 §6.1): read as net/http's client reads
		// it, the coding ignored (up to the close), and the connection
		// never reused, whatever the host said of it.
		res.close = true
	case te:
		res.chunked, res.length = true, -1
	}
	if !res.chunked {
		res.trailers = nil // none can come: net/http's client ignores the field, ReverseProxy drops it
	}
	for _, k := range res.trailers {
		if k == "Transfer-Encoding" || k == "Trailer" || k == "Content-Length" {
			return errFastHead // net/http's client refuses the response (ReverseProxy: 502)
		}
	}
	res.stream = res.length < 0
	return nil
}

func (res *fastResp) dropKey(k string) {
	for i := 0; i < res.n; i++ {
		if res.keys[i] == k {
			res.keys[i] = ""
		}
	}
	for i := range res.more {
		if res.more[i].key == k {
			res.more[i].key = ""
		}
	}
}

// copyTo adds res's headers to h (as ReverseProxy's copyHeader: values
// are appended), less those the host's Connection header named and the
// gateway's own (gatewayField: X-Gatehouse-*, X-Failover-Cluster), and
// stamps X-Gatehouse-Cluster (cluster nil: none). The values share one
// string and one []string.
func (res *fastResp) copyTo(h http.Header, cluster []string) {
	for _, k := range res.connToks {
		res.dropKey(k)
	}
	n := res.n + len(res.more)
	vals, b := headMemory(n, len(res.text))
	text := ""
	if len(b) > 0 {
		copy(b, res.text)
		text = unsafe.String(&b[0], len(b)) // b is never written again
	}
	add := func(i int, k string, start, end int32) {
		if k == "" || gatewayField(k) {
			return
		}
		vals[i] = text[start:end]
		if old, ok := h[k]; ok {
			h[k] = append(old, vals[i])
			return
		}
		h[k] = vals[i : i+1 : i+1]
	}
	for i := 0; i < res.n; i++ {
		add(i, res.keys[i], res.vals[i][0], res.vals[i][1])
	}
	for j, kv := range res.more {
		add(res.n+j, kv.key, kv.start, kv.end)
	}
	if cluster != nil {
		if old, ok := h[HeaderCluster]; ok {
			h[HeaderCluster] = append(old, cluster...)
		} else {
			h[HeaderCluster] = cluster
		}
	}
	if ct, ok := h["Content-Type"]; !ok {
		untyped(h)
	} else if len(ct) > 0 && isEventStream(ct[0]) {
		res.stream = true
	}
}

// isEventStream reports a text/event-stream media type, parameters aside.
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// commonKey returns the interned canonical name of a common response
// header, or "" and false: the fields most heads carry cost no string
// allocation. A switch on string(b) compares without converting.
func commonKey(b []byte) (string, bool) {
	switch string(b) {
	case "Accept-Ranges":
		return "Accept-Ranges", true
	case "Access-Control-Allow-Origin":
		return "Access-Control-Allow-Origin", true
	case "Age":
		return "Age", true
	case "Cache-Control":
		return "Cache-Control", true
	case "Connection":
		return "Connection", true
	case "Content-Disposition":
		return "Content-Disposition", true
	case "Content-Encoding":
		return "Content-Encoding", true
	case "Content-Language":
		return "Content-Language", true
	case "Content-Length":
		return "Content-Length", true
	case "Content-Location":
		return "Content-Location", true
	case "Content-Range":
		return "Content-Range", true
	case "Content-Security-Policy":
		return "Content-Security-Policy", true
	case "Content-Type":
		return "Content-Type", true
	case "Date":
		return "Date", true
	case "Etag":
		return "Etag", true
	case "Expires":
		return "Expires", true
	case "Keep-Alive":
		return "Keep-Alive", true
	case "Last-Modified":
		return "Last-Modified", true
	case "Link":
		return "Link", true
	case "Location":
		return "Location", true
	case "Pragma":
		return "Pragma", true
	case "Referrer-Policy":
		return "Referrer-Policy", true
	case "Retry-After":
		return "Retry-After", true
	case "Server":
		return "Server", true
	case "Set-Cookie":
		return "Set-Cookie", true
	case "Strict-Transport-Security":
		return "Strict-Transport-Security", true
	case "Trailer":
		return "Trailer", true
	case "Transfer-Encoding":
		return "Transfer-Encoding", true
	case "Upgrade":
		return "Upgrade", true
	case "Vary":
		return "Vary", true
	case "Via":
		return "Via", true
	case "Www-Authenticate":
		return "Www-Authenticate", true
	case "X-Content-Type-Options":
		return "X-Content-Type-Options", true
	case "X-Frame-Options":
		return "X-Frame-Options", true
	case "X-Request-Id":
		return "X-Request-Id", true
	case "X-Gatehouse-Cluster":
		return "X-Gatehouse-Cluster", true
	case "Proxy-Connection":
		return "Proxy-Connection", true
	case "Te":
		return "Te", true
	}
	return "", false
}

// canonicalKey returns the canonical form of a header name, interned when
// common; false for a name that is not a token, "" for one with a space
// (which net/http's client accepts and its server never writes: a head
// with one is refused, errFieldSpace).
func canonicalKey(b []byte) (string, bool) {
	canonical := true
	upper := true
	space := false
	for _, c := range b {
		if c == ' ' {
			space = true
			continue
		}
		if !httpguts.IsTokenRune(rune(c)) {
			return "", false
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	if space {
		return "", true
	}
	if canonical {
		if k, ok := commonKey(b); ok {
			return k, true
		}
		return string(b), true
	}
	return textproto.CanonicalMIMEHeaderKey(string(b)), true
}

// copyN copies n bytes (n < 0: until EOF) from br to w, flushing after
// every write when stream: what is buffered straight from br's buffer,
// the rest through a pooled 32 KiB buffer. A body of known length that
// fits that buffer and has not all arrived with the head is gathered
// whole first, so that it reaches the client in one write with its head
// rather than in as many as the host's segments came in.
func copyN(w http.ResponseWriter, br *bufio.Reader, n int64, stream bool) error {
	var buf *[bufSize]byte
	defer func() {
		if buf != nil {
			buffers.Put(buf)
		}
	}()
	if !stream && n > int64(br.Buffered()) && n <= bufSize {
		buf = buffers.Get().(*[bufSize]byte)
		p := buf[:n]
		if _, err := io.ReadFull(br, p); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		_, err := w.Write(p)
		return err
	}
	for n != 0 {
		var p []byte
		if k := br.Buffered(); k > 0 {
			if n > 0 && int64(k) > n {
				k = int(n)
			}
			p, _ = br.Peek(k)
			if _, err := w.Write(p); err != nil {
				return err
			}
			_, _ = br.Discard(k)
		} else {
			if buf == nil {
				buf = buffers.Get().(*[bufSize]byte)
			}
			p = buf[:]
			if n > 0 && int64(len(p)) > n {
				p = p[:n]
			}
			k, err := br.Read(p)
			if k == 0 {
				if err == io.EOF && n < 0 {
					return nil
				}
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			p = p[:k]
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
		if n > 0 {
			n -= int64(len(p))
		}
		if stream {
			flush(w)
		}
	}
	return nil
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// readChunkSize reads a chunk-size line as net/http's client does, for
// the two paths to read a host's chunked body alike: the line ends in
// CRLF, with no other CR (a bare LF is refused since CVE-2025-22871) and
// within the read buffer (net/http's buffer is the same 4 KiB); blanks at
// its end are trimmed before any extension is cut off, and the size is up
// to 16 hex digits with nothing around them.
func readChunkSize(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == io.EOF:
		return 0, io.ErrUnexpectedEOF
	case err != nil:
		return 0, errFastHead // bufio.ErrBufferFull: a line too long
	case len(line) < 2 || bytes.IndexByte(line, '\r') != len(line)-2:
		return 0, errFastHead
	}
	size, _, _ := bytes.Cut(bytes.TrimRight(line[:len(line)-2], " \t"), []byte(";"))
	if len(size) == 16 && size[0] == '0' {
		size = size[1:] // ParseChunkSize takes 15 digits, all an int64 holds
	}
	n, ok := httpwire.ParseChunkSize(size)
	if !ok {
		return 0, errFastHead
	}
	return n, nil
}

// copyChunked decodes a chunked body from br to w and passes its trailers
// on, as ReverseProxy does: under their own names when every one was
// announced, otherwise all with http.TrailerPrefix. Those trailerOK
// refuses (own: Options.OwnFields) are dropped, as on that path.
func copyChunked(w http.ResponseWriter, br *bufio.Reader, stream bool, announced, own []string) error {
	budget := maxFastHead
	var long []byte
	for {
		n, err := readChunkSize(br)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if err := copyN(w, br, n, stream); err != nil {
			return err
		}
		if crlf, err := br.Peek(2); err != nil || crlf[0] != '\r' || crlf[1] != '\n' {
			return errFastHead // net/http's client wants CRLF after the data, nothing else
		}
		_, _ = br.Discard(2)
	}
	var tr []fastKV
	var text []byte
	for {
		line, err := readLine(br, &long, &budget)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			return errFastHead
		}
		key, ok := canonicalKey(line[:i])
		v := bytes.TrimSpace(line[i+1:])
		if !ok || !httpwire.ValidValue(v) {
			return errFastHead
		}
		if !trailerOK(key, own) {
			continue
		}
		start := int32(len(text))
		text = append(text, v...)
		tr = append(tr, fastKV{key, start, int32(len(text))})
	}
	if len(tr) == 0 {
		return nil
	}
	flush(w) // trailers need a chunked response
	all := true
	for _, kv := range tr {
		found := false
		for _, a := range announced {
			found = found || a == kv.key
		}
		all = all && found
	}
	h := w.Header()
	s := string(text)
	for _, kv := range tr {
		k := kv.key
		if !all {
			k = http.TrailerPrefix + k
		}
		h[k] = append(h[k], s[kv.start:kv.end])
	}
	return nil
}
