package gatehouse

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// The whole gateway over HTTP/2, end to end: a client speaking h2 to the
// https listener, every layer of the chain, and real hosts behind it (one
// HTTP/1.1, one h2c). Each test runs against gatehouse's own HTTP/2 server
// (listeners.fast_path on) and net/http's (off), and asserts the same
// observable behaviour of both.

// h2Wait bounds every wait in these tests: a gateway that holds a byte
// back fails the test instead of hanging it.
const h2Wait = 10 * time.Second

// h2Impls names the two servers by the fast_path setting that picks them.
var h2Impls = []struct {
	name string
	fast bool
}{{"internal-h2", true}, {"net-http", false}}

// h2Env is a whole gatehouse with these apps:
//   - web: a plain HTTP/1.1 host that streams, holds and hashes (webHost);
//   - grpc: an h2c-only host speaking gRPC's framing (grpcHost);
//   - tight (one request a minute), locked (auth required), fenced
//     (/admin/* denied), vault (passthrough): refusals, no host needed.
type h2Env struct {
	r      *running
	issuer ed25519.PrivateKey
	probes sync.Map     // key → *h2Probe: where a test and a host handler meet
	hits   atomic.Int64 // requests webHost has seen
}

// withGRPC false leaves grpc without its host: a host outliving a gateway
// that a test stops waits for its leave to reach the gone bus (host's
// leaveFlushTimeout), and one such wait is enough.
func newH2Env(t *testing.T, fast, withGRPC bool) *h2Env {
	t.Helper()
	priv, keys := issuerKey(t)
	cfg := testConfig(t)
	cfg.Listeners.FastPath = fast
	cfg.Auth.Issuers = []config.Issuer{{Issuer: "idp", KeysFile: keys}}
	e := &h2Env{r: start(t, cfg), issuer: priv}
	for app, body := range map[string]string{
		"web":    `{"rate_limit":{"requests":100000,"window":"60s"}}`,
		"grpc":   `{}`,
		"tight":  `{"rate_limit":{"requests":1,"window":"60s"}}`,
		"locked": `{"auth":{"required":true}}`,
		"fenced": `{"policy":[{"action":"deny","path":"/admin/*"}]}`,
		"vault":  `{"mode":"passthrough"}`,
	} {
		if code, b := e.r.control(t, "PUT", "/api/v3/apps/"+app, body); code != 200 {
			t.Fatalf("put app %s: %d %s", app, code, b)
		}
	}
	startHost(t, e.r, "web-1", "web", http.HandlerFunc(e.webHost))
	if withGRPC {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		runHost(t, e.r, "one", "grpc-1", "grpc", host.SchemeH2C, ln, http.HandlerFunc(e.grpcHost))
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		tbl := e.r.g.Live().Load()
		return len(tbl.Pool("web")) == 1 && (len(tbl.Pool("grpc")) == 1 || !withGRPC)
	}, "the hosts never became routable")
	return e
}

// h2Probe lets a test and the host's handler for one request meet.
type h2Probe struct {
	arrived   atomic.Int32
	started   chan struct{} // closed when a handler has begun
	release   chan struct{} // closed to let the handlers go on
	ended     chan struct{} // closed when a handler saw its request's context end
	startOnce sync.Once
	endOnce   sync.Once
	relOnce   sync.Once
}

func (e *h2Env) probe(key string) *h2Probe {
	v, _ := e.probes.LoadOrStore(key, &h2Probe{started: make(chan struct{}), release: make(chan struct{}), ended: make(chan struct{})})
	return v.(*h2Probe)
}

func (p *h2Probe) start()      { p.startOnce.Do(func() { close(p.started) }) }
func (p *h2Probe) end()        { p.endOnce.Do(func() { close(p.ended) }) }
func (p *h2Probe) letGo()      { p.relOnce.Do(func() { close(p.release) }) }
func (p *h2Probe) seen() bool  { return p.arrived.Load() > 0 }
func (p *h2Probe) arrive() int { return int(p.arrived.Add(1)) }

// hold waits for ch, the request's end, or h2Wait; it reports whether ch
// closed.
func hold(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	case <-time.After(h2Wait):
	}
	return false
}

// await fails t unless ch closes within h2Wait.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(h2Wait):
		t.Fatalf("timed out after %v waiting for %s", h2Wait, what)
	}
}

// webHost answers by path; k names the request's probe.
//   - /sse: one event, flushed; the second after the probe's release.
//   - /bytes?n=&seed=[&all=][&pause=]: n pseudo-random bytes of seed,
//     once all requests of the probe have arrived; with pause, that many
//     first and the rest after the probe's release.
//   - /upload[?all=]: the body's length and SHA-256, likewise.
//   - /hang[?head=1]: (with head, a flushed answer first; for a PUT, after
//     reading the body) wait for the request's context to end, and tell
//     the probe.
//   - /bighead: a 40 KiB response field, and the length of the request's
//     X-Req-Big.
//   - /short, /chunkabort: 30000 bytes, then the host fails (with and
//     without a Content-Length promising more).
//   - /early, /earlyread: 413 to an upload, before reading any of it or
//     after 1 MiB.
func (e *h2Env) webHost(w http.ResponseWriter, r *http.Request) {
	e.hits.Add(1)
	q := r.URL.Query()
	p := e.probe(q.Get("k"))
	arrived := p.arrive()
	p.start()
	rc := http.NewResponseController(w)
	switch r.URL.Path {
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		rc.Flush()
		if !hold(r.Context(), p.release) {
			return
		}
		io.WriteString(w, "data: 2\n\n")
	case "/bytes", "/upload":
		if all, _ := strconv.Atoi(q.Get("all")); all > 1 && arrived >= all {
			p.letGo()
		} else if all > 1 && !hold(r.Context(), p.release) {
			http.Error(w, "the other streams of the batch never arrived", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/upload" {
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
			return
		}
		n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
		seed, _ := strconv.ParseUint(q.Get("seed"), 10, 64)
		w.Header().Set("Content-Type", "application/octet-stream")
		src := pseudoRandom(seed, n)
		pause, _ := strconv.ParseInt(q.Get("pause"), 10, 64)
		// Of a length-delimited answer the chain may hold the last few
		// KiB before a pause in its buffers (net/http's server and
		// internal/h2 alike: a known length is not a stream, flushed only
		// at its end); one of unknown length is flushed on every write.
		if pause == 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		} else {
			io.CopyN(w, src, pause)
			rc.Flush()
			if !hold(r.Context(), p.release) {
				return
			}
		}
		io.Copy(w, src)
	case "/hang":
		if r.Method == "PUT" {
			// An HTTP/1.1 server notices a closed connection only while
			// it reads: an upload's handler reads until the body fails.
			io.Copy(io.Discard, r.Body)
		}
		if q.Get("head") != "" {
			io.WriteString(w, "started")
			rc.Flush()
		}
		if !hold(r.Context(), p.release) && r.Context().Err() != nil {
			p.end()
		}
	case "/bighead":
		w.Header().Set("X-Big", strings.Repeat("b", 40<<10))
		fmt.Fprintf(w, "saw %d", len(r.Header.Get("X-Req-Big")))
	case "/short", "/chunkabort":
		if r.URL.Path == "/short" {
			w.Header().Set("Content-Length", "100000")
		}
		io.WriteString(w, strings.Repeat("s", 30000))
		rc.Flush()
		panic(http.ErrAbortHandler) // the connection to the gateway is cut
	case "/early":
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	case "/earlyread":
		io.CopyN(io.Discard, r.Body, 1<<20)
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	default:
		io.WriteString(w, "ok")
	}
}

// pseudoRandom is n bytes that depend only on seed: what a download
// should deliver and an upload carry, byte for byte.
func pseudoRandom(seed uint64, n int64) io.Reader {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return io.LimitReader(rand.NewChaCha8(s), n)
}

// mustSum is r's length and SHA-256 as /upload reports them, for a
// reader that cannot fail.
func mustSum(r io.Reader) string {
	n, sum, _ := sumOf(r)
	return fmt.Sprintf("%d %s", n, sum)
}

func sumOf(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return n, hex.EncodeToString(h.Sum(nil)), err
}

// client is a transport to the https listener that dials with SNI sni
// and ALPN proto ("h2" or "http/1.1") and speaks only that; dials counts
// its connections.
func (e *h2Env) client(t *testing.T, sni, proto string) (tr *http.Transport, dials *atomic.Int32) {
	dials = new(atomic.Int32)
	addr := e.r.g.Addrs().HTTPS
	tr = &http.Transport{DisableCompression: true, Protocols: new(http.Protocols),
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			d := tls.Dialer{Config: &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{proto}}}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			if got := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; got != proto && !(proto == "http/1.1" && got == "") {
				c.Close()
				return nil, fmt.Errorf("ALPN %q, want %q", got, proto)
			}
			return c, nil
		}}
	if proto == "h2" {
		tr.Protocols.SetHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, dials
}

// roundTrip sends req on tr within h2Wait; an HTTP/2 transport's answer
// must come over HTTP/2.
func roundTrip(t *testing.T, tr *http.Transport, req *http.Request) *http.Response {
	t.Helper()
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	if tr.Protocols.HTTP2() && res.ProtoMajor != 2 {
		t.Fatalf("%s %s answered over %s", req.Method, req.URL, res.Proto)
	}
	return res
}

func newReq(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestH2EndToEnd runs HTTP/2 traffic through the whole gateway, once per
// HTTP/2 server: gRPC-shaped full-duplex streams with trailers to an h2c
// host, Server-Sent Events flushed through the chain, large bodies both
// ways on one multiplexed connection, client resets reaching the host,
// and the gateway's own refusals as the same problems HTTP/1.1 gets.
func TestH2EndToEnd(t *testing.T) {
	for _, impl := range h2Impls {
		t.Run(impl.name, func(t *testing.T) {
			e := newH2Env(t, impl.fast, true)
			t.Run("grpc", e.testGRPC)
			t.Run("grpc full duplex", e.testGRPCDuplex)
			t.Run("grpc errors", e.testGRPCErrors)
			t.Run("sse", e.testSSE)
			t.Run("bulk", e.testBulk)
			t.Run("cancel", e.testCancel)
			t.Run("broken host", e.testBrokenHost)
			t.Run("large header blocks", e.testLargeHeaders)
			t.Run("early answer to an upload", e.testEarlyAnswer)
			t.Run("refusals", e.testRefusals)
			t.Run("header list too large", e.testHeaderListTooLarge)
			t.Run("OPTIONS *", e.testOptionsStar)
		})
	}
}

// grpcFrame is p as one gRPC length-prefixed message (uncompressed).
func grpcFrame(p string) []byte {
	b := make([]byte, 5+len(p))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(p)))
	copy(b[5:], p)
	return b
}

func readGRPC(r io.Reader) (string, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[1:]))
	_, err := io.ReadFull(r, b)
	return string(b), err
}

// grpcHost is a bidirectional-streaming gRPC method in miniature: each
// message it reads is answered at once, and when the client's half ends
// the status goes in the trailers, with the request trailer it saw (in an
// undeclared trailer, as gRPC servers send metadata). /Fail answers
// trailers-only (the status in the only HEADERS), /Abort resets its
// stream after one answer, /Pipe sends back each chunk as it reads it,
// /Hang (with probe k) waits for its request's context to end.
func (e *h2Env) grpcHost(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" {
		http.Error(w, "gRPC over HTTP/2 only, got "+r.Proto, http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/grpc")
	switch r.URL.Path {
	case "/echo.Echo/Fail":
		w.Header().Set("Grpc-Status", "5")
		w.Header().Set("Grpc-Message", "not found")
		return
	case "/echo.Echo/Abort":
		readGRPC(r.Body)
		w.Write(grpcFrame("partial"))
		rc.Flush()
		panic(http.ErrAbortHandler) // RST_STREAM to the gateway
	case "/echo.Echo/Pipe":
		// Full duplex in bulk: every chunk read is sent back at once.
		w.WriteHeader(http.StatusOK)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	case "/echo.Echo/Hang":
		p := e.probe(r.URL.Query().Get("k"))
		p.arrive()
		rc.Flush()
		p.start()
		if !hold(r.Context(), p.release) && r.Context().Err() != nil {
			p.end()
		}
		return
	}
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	n := 0
	var err error
	for {
		var msg string
		if msg, err = readGRPC(r.Body); err != nil {
			break
		}
		n++
		w.Write(grpcFrame(fmt.Sprintf("echo %d: %s", n, msg)))
		rc.Flush()
	}
	if !errors.Is(err, io.EOF) {
		w.Header().Set("Grpc-Status", "13")
		w.Header().Set("Grpc-Message", "reading the stream: "+err.Error())
		return
	}
	w.Header().Set("Grpc-Status", "3")
	w.Header().Set("Grpc-Message", fmt.Sprintf("%d messages", n))
	w.Header().Set(http.TrailerPrefix+"X-Saw-Checksum", r.Trailer.Get("X-Checksum"))
}

// grpcReq is a gRPC call's request for method with body.
func grpcReq(t *testing.T, ctx context.Context, method string, body io.Reader) *http.Request {
	req := newReq(t, ctx, "POST", "https://grpc.test.local/echo.Echo/"+method, body)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	return req
}

// Four bidirectional streams at once on one connection, each in lockstep
// (a message sent only once the previous one's answer came back, so
// nothing can be batched on the way), then the client's trailers to the
// host and the host's status trailers back to the client as HTTP/2
// trailers.
func (e *h2Env) testGRPC(t *testing.T) {
	tr, dials := e.client(t, "grpc.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	// One call first: a transport dials for each request that finds no
	// connection yet, and the streams must share one.
	warm := roundTrip(t, tr, grpcReq(t, ctx, "Fail", nil))
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	const streams = 4
	errs := make(chan error, streams)
	for i := range streams {
		req := grpcReq(t, ctx, "Chat", nil)
		go func() { errs <- grpcChat(tr, req, fmt.Sprint(i)) }()
	}
	for range streams {
		if err := <-errs; err != nil { // each call ends with ctx at the latest
			t.Error(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the streams took %d connections, want 1", n)
	}
}

// grpcChat runs one lockstep Chat of three messages on req (its body is
// set here), tagged with id.
func grpcChat(tr *http.Transport, req *http.Request, id string) error {
	pr, pw := io.Pipe()
	defer pw.Close()
	req.Body, req.ContentLength = pr, -1
	req.Trailer = http.Header{"X-Checksum": nil}
	type answer struct {
		res *http.Response
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		res, err := tr.RoundTrip(req)
		answers <- answer{res, err}
	}()
	var res *http.Response
	for i := 1; i <= 3; i++ {
		if _, err := pw.Write(grpcFrame(fmt.Sprintf("msg %s.%d", id, i))); err != nil {
			return fmt.Errorf("stream %s: sending message %d: %w", id, i, err)
		}
		if res == nil {
			a := <-answers // RoundTrip ends with the request's context at the latest
			if a.err != nil {
				return fmt.Errorf("stream %s: %w", id, a.err)
			}
			res = a.res
			defer res.Body.Close()
			if res.StatusCode != 200 || res.ProtoMajor != 2 || res.Header.Get("Content-Type") != "application/grpc" {
				return fmt.Errorf("stream %s: answer %s %d %v", id, res.Proto, res.StatusCode, res.Header)
			}
		}
		got, err := readGRPC(res.Body)
		if want := fmt.Sprintf("echo %d: msg %s.%d", i, id, i); err != nil || got != want {
			return fmt.Errorf("stream %s: answer %d %q, %v; want %q", id, i, got, err, want)
		}
	}
	req.Trailer.Set("X-Checksum", "c-"+id)
	pw.Close()
	if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
		return fmt.Errorf("stream %s: after the last answer: %q, %v", id, rest, err)
	}
	want := map[string]string{"Grpc-Status": "3", "Grpc-Message": "3 messages", "X-Saw-Checksum": "c-" + id}
	for k, v := range want {
		if got := res.Trailer.Values(k); len(got) != 1 || got[0] != v || res.Header.Get(k) != "" {
			return fmt.Errorf("stream %s: %s is %q in the trailers, %q in the header; want %q in the trailers only", id, k, got, res.Header.Get(k), v)
		}
	}
	return nil
}

// Full duplex in bulk to the h2c host: 8 MiB sent while the host sends
// every chunk back as it reads it, so both directions' windows cross the
// gateway at once; the echo must be byte-exact.
func (e *h2Env) testGRPCDuplex(t *testing.T) {
	tr, _ := e.client(t, "grpc.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	const n = 8 << 20
	res := roundTrip(t, tr, grpcReq(t, ctx, "Pipe", pseudoRandom(9, n)))
	defer res.Body.Close()
	got, sum, err := sumOf(res.Body)
	if _, want, _ := sumOf(pseudoRandom(9, n)); err != nil || sum != want {
		t.Errorf("echo of %d bytes: %d bytes, %v, SHA-256 %s; want %s", n, got, err, sum, want)
	}
}

// A trailers-only error keeps its status in the header block; a host that
// resets its stream mid-answer resets the client's too: the client sees
// an error where the body ends, never a clean end of a cut answer.
func (e *h2Env) testGRPCErrors(t *testing.T) {
	tr, dials := e.client(t, "grpc.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	res := roundTrip(t, tr, grpcReq(t, ctx, "Fail", bytes.NewReader(grpcFrame("x"))))
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(b) != 0 || res.StatusCode != 200 || res.Header.Get("Grpc-Status") != "5" || res.Header.Get("Grpc-Message") != "not found" {
		t.Errorf("trailers-only: %d %v %q %v", res.StatusCode, res.Header, b, err)
	}
	res = roundTrip(t, tr, grpcReq(t, ctx, "Abort", bytes.NewReader(grpcFrame("x"))))
	b, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || string(b) != string(grpcFrame("partial")) {
		t.Errorf("host reset mid-answer: %q, %v; want the first message, then an error", b, err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the calls took %d connections, want 1", n)
	}
}

// The first event reaches the client while the host still holds the
// response open: nothing on the way buffers a text/event-stream.
func (e *h2Env) testSSE(t *testing.T) {
	tr, _ := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	p := e.probe("sse-" + t.Name())
	res := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local/sse?k=sse-"+t.Name(), nil))
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer: %d %v", res.StatusCode, res.Header)
	}
	first := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != "data: 1\n\n" {
		t.Fatalf("first event %q, %v (held back until the host ends?)", first, err)
	}
	select {
	case <-p.release:
		t.Fatal("the host was let go before the first event arrived")
	default:
	}
	p.letGo()
	if rest, err := io.ReadAll(res.Body); err != nil || string(rest) != "data: 2\n\n" {
		t.Fatalf("after the first event: %q, %v", rest, err)
	}
}

// A 64 MiB download, a 16 MiB upload and four small downloads as
// concurrent streams of one connection, each byte-exact. The host holds
// every answer until all six requests have arrived, so the streams are
// open at once, not one after another.
func (e *h2Env) testBulk(t *testing.T) {
	tr, dials := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*h2Wait)
	defer cancel()
	warm := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local/ok", nil))
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()

	batch := "bulk-" + t.Name()
	const all = 6
	type job struct {
		name   string
		up     bool
		n      int64
		seed   uint64
		expect string // length and SHA-256, as the host reports an upload
	}
	jobs := []job{{name: "download 64 MiB", n: 64 << 20, seed: 1}, {name: "upload 16 MiB", up: true, n: 16 << 20, seed: 2}}
	for i := range 4 {
		jobs = append(jobs, job{name: fmt.Sprintf("download %d", i), n: 256<<10 + int64(i), seed: uint64(10 + i)})
	}
	for i := range jobs {
		jobs[i].expect = mustSum(pseudoRandom(jobs[i].seed, jobs[i].n))
	}
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- e.bulkJob(ctx, tr, batch, all, j.up, j.n, j.seed, j.expect) }()
	}
	for range jobs {
		if err := <-errs; err != nil { // each job ends with ctx at the latest
			t.Error(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the streams took %d connections, want 1", n)
	}
}

func (e *h2Env) bulkJob(ctx context.Context, tr *http.Transport, batch string, all int, up bool, n int64, seed uint64, expect string) error {
	var req *http.Request
	var err error
	if up {
		req, err = http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("https://web.test.local/upload?k=%s&all=%d", batch, all), pseudoRandom(seed, n))
		req.ContentLength = n
	} else {
		req, err = http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://web.test.local/bytes?k=%s&all=%d&n=%d&seed=%d", batch, all, n, seed), nil)
	}
	if err != nil {
		return err
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.ProtoMajor != 2 {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%s %s: %s %d %q", req.Method, req.URL.Path, res.Proto, res.StatusCode, b)
	}
	var got string
	if up {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return fmt.Errorf("upload's answer: %w", err)
		}
		got = string(b)
	} else {
		m, sum, err := sumOf(res.Body)
		if err != nil {
			return fmt.Errorf("download of %d bytes: %w after %d", n, err, m)
		}
		got = fmt.Sprintf("%d %s", m, sum)
	}
	if got != expect {
		return fmt.Errorf("%s %s: got %s, want %s", req.Method, req.URL.Path, got, expect)
	}
	return nil
}

// A client that cancels a stream (RST_STREAM CANCEL) cancels the host's
// request too: before the answer, in the middle of its body, in the
// middle of the client's upload, and on a gRPC stream to an h2c host (a
// reset the gateway passes on as one). The connection goes on serving the
// client's other streams.
func (e *h2Env) testCancel(t *testing.T) {
	for _, tc := range []struct {
		name, app, method, path string
		upload                  bool   // the request's body is still open at the reset
		answered                bool   // the reset comes after the answer's head
		first                   string // and after this much of its body
	}{
		{name: "before the answer", app: "web", method: "GET", path: "/hang"},
		{name: "mid-body", app: "web", method: "GET", path: "/hang?head=1", answered: true, first: "started"},
		{name: "mid-upload", app: "web", method: "PUT", path: "/hang", upload: true},
		{name: "grpc stream to an h2c host", app: "grpc", method: "POST", path: "/echo.Echo/Hang", upload: true, answered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, dials := e.client(t, tc.app+".test.local", "h2")
			key := "cancel-" + t.Name()
			p := e.probe(key)
			ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
			defer cancel()
			sep := "?"
			if strings.Contains(tc.path, "?") {
				sep = "&"
			}
			req := newReq(t, ctx, tc.method, "https://"+tc.app+".test.local"+tc.path+sep+"k="+key, nil)
			req.Header.Set("Content-Type", "application/grpc")
			if tc.upload {
				pr, pw := io.Pipe()
				defer pw.Close()
				req.Body, req.ContentLength = pr, -1
				go pw.Write(grpcFrame(strings.Repeat("u", 64<<10))) // ends when the transport closes pr
				// Go's transport, once it has the answer, notices the
				// cancel only when the body it is sending ends (its
				// body read does not watch ctx): a body that ends with
				// ctx, as a gRPC client's stream does.
				context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
			}
			errc := make(chan error, 1)
			go func() {
				res, err := tr.RoundTrip(req)
				if err == nil {
					b := make([]byte, len(tc.first))
					if _, err = io.ReadFull(res.Body, b); err == nil && string(b) != tc.first {
						err = fmt.Errorf("body %q", b)
					}
					if err == nil && tc.answered {
						errc <- nil // the stream is where the case resets it
					}
					if err == nil {
						_, err = io.Copy(io.Discard, res.Body)
					}
					res.Body.Close()
				}
				errc <- err
			}()
			await(t, p.started, "the host to see the request")
			if tc.answered {
				if err := <-errc; err != nil { // the round trip ends with ctx at the latest
					t.Fatalf("before the reset: %v", err)
				}
			}
			cancel()
			await(t, p.ended, "the host's request context to end after the client's reset")
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("the client's stream ended with %v, want context.Canceled", err)
			}
			ctx2, cancel2 := context.WithTimeout(context.Background(), h2Wait)
			defer cancel2()
			after := newReq(t, ctx2, "GET", "https://web.test.local/ok", nil)
			if tc.app == "grpc" {
				after = grpcReq(t, ctx2, "Fail", nil)
			}
			res := roundTrip(t, tr, after)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || dials.Load() != 1 {
				t.Errorf("after the reset: %d on connection %d, want 200 on the first", res.StatusCode, dials.Load())
			}
		})
	}
}

// A host that fails mid-answer (its connection cut after 30000 bytes,
// with or without a Content-Length promising more) resets the client's
// stream: the client sees an error where the body stops, never a clean
// end of a truncated answer, and the connection serves on.
func (e *h2Env) testBrokenHost(t *testing.T) {
	tr, dials := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	for _, path := range []string{"/short", "/chunkabort"} {
		res := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local"+path, nil))
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || len(b) != 30000 || err == nil || ctx.Err() != nil {
			t.Errorf("%s: %d, %d bytes, %v; want 200, 30000 bytes, then a reset", path, res.StatusCode, len(b), err)
		}
	}
	e.expectOK(t, ctx, tr, dials)
}

// expectOK asserts that tr's one connection still serves a request.
func (e *h2Env) expectOK(t *testing.T, ctx context.Context, tr *http.Transport, dials *atomic.Int32) {
	t.Helper()
	res := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local/ok", nil))
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "ok" || err != nil || dials.Load() != 1 {
		t.Errorf("then: %d %q %v on connection %d, want 200 ok on the first", res.StatusCode, b, err, dials.Load())
	}
}

// Header blocks over one frame (16 KiB) cross the gateway both ways, as
// HEADERS and CONTINUATION frames.
func (e *h2Env) testLargeHeaders(t *testing.T) {
	tr, _ := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	req := newReq(t, ctx, "GET", "https://web.test.local/bighead", nil)
	req.Header.Set("X-Req-Big", strings.Repeat("r", 30<<10))
	res := roundTrip(t, tr, req)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != fmt.Sprint("saw ", 30<<10) || err != nil || res.Header.Get("X-Big") != strings.Repeat("b", 40<<10) {
		t.Errorf("%d %q %v, X-Big of %d bytes; want the host to see 30 KiB and the client 40 KiB", res.StatusCode, b, err, len(res.Header.Get("X-Big")))
	}
}

// A host that answers an upload before reading it all: the client gets
// the answer, its upload stops, and the connection serves on.
func (e *h2Env) testEarlyAnswer(t *testing.T) {
	tr, dials := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	for _, path := range []string{"/early", "/earlyread"} {
		req := newReq(t, ctx, "PUT", "https://web.test.local"+path, pseudoRandom(3, 16<<20))
		req.ContentLength = 16 << 20
		res := roundTrip(t, tr, req)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large\n" || err != nil {
			t.Errorf("%s: %d %q %v; want 413 too large", path, res.StatusCode, b, err)
		}
	}
	e.expectOK(t, ctx, tr, dials)
}

// The gateway's own refusals over HTTP/2 are the problem+json answers
// HTTP/1.1 gets on the same listener: status, fields and body alike.
func (e *h2Env) testRefusals(t *testing.T) {
	other, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": "idp", "sub": "alice", "aud": []string{"shop"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(e.issuer)
	if err != nil {
		t.Fatal(err)
	}
	// tight allows one request a minute: this one spends it.
	h1, _ := e.client(t, "tight.test.local", "http/1.1")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	res := roundTrip(t, h1, newReq(t, ctx, "GET", "https://tight.test.local/", nil))
	res.Body.Close()
	if res.StatusCode == http.StatusTooManyRequests {
		t.Fatal("the first request to tight was already over its limit")
	}
	for _, tc := range []struct {
		name, sni, host, path, token string
		status                       int
	}{
		{"unknown host", "nope.test.local", "nope.test.local", "/", "", 404},
		{"passthrough app on a terminated connection", "web.test.local", "vault.test.local", "/", "", 421},
		{"over the rate limit", "tight.test.local", "tight.test.local", "/", "", 429},
		{"no token", "locked.test.local", "locked.test.local", "/", "", 401},
		{"token for another app", "locked.test.local", "locked.test.local", "/", other, 403},
		{"denied by policy", "fenced.test.local", "fenced.test.local", "/admin/users", "", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]parityRes
			for i, proto := range []string{"h2", "http/1.1"} {
				tr, _ := e.client(t, tc.sni, proto)
				req := newReq(t, ctx, "GET", "https://"+tc.sni+tc.path, nil)
				req.Host = tc.host
				req.Header.Set("User-Agent", "h2e2e/1")
				if tc.token != "" {
					req.Header.Set("Authorization", "Bearer "+tc.token)
				}
				res := roundTrip(t, tr, req)
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil {
					t.Fatalf("%s: reading the body: %v", proto, err)
				}
				var p problem.Problem
				if res.StatusCode != tc.status || res.Header.Get("Content-Type") != problem.ContentType ||
					jsonStrict(b, &p) != nil || p.Status != tc.status || p.Title != http.StatusText(tc.status) {
					t.Errorf("%s: %d %v %q, want a %d problem", proto, res.StatusCode, res.Header, b, tc.status)
				}
				got[i] = parityRes{Status: res.StatusCode, Header: res.Header, Body: string(b)}
				got[i].normalize()
				// The wait left may tick between the two requests.
				if got[i].Header.Get("Retry-After") != "" {
					got[i].Header.Set("Retry-After", "(present)")
				}
				got[i].Body = retryAfterSeconds.ReplaceAllString(got[i].Body, "retry after (n) s")
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
				t.Errorf("HTTP/2 and HTTP/1.1 differ:\nh2:       %+v\nhttp/1.1: %+v", got[0], got[1])
			}
		})
	}
}

var retryAfterSeconds = regexp.MustCompile(`retry after \d+ s`)

// A header list over listeners.max_header_bytes (64 KiB) is refused with
// the 431 problem HTTP/1.1 gets for a head over it. The HTTP/2 request is
// sent frame by frame: Go's transport will not send a header list over
// the server's advertised limit.
func (e *h2Env) testHeaderListTooLarge(t *testing.T) {
	var fields [][2]string
	for i := range 68 {
		// Pseudo-random values: HPACK cannot shrink the list much.
		v, _ := io.ReadAll(pseudoRandom(uint64(100+i), 500))
		fields = append(fields, [2]string{"x-pad-" + strconv.Itoa(i), hex.EncodeToString(v)})
	}
	c := dialRawH2(t, e.r.g.Addrs().HTTPS, "web.test.local")
	c.open(t, 1, "GET", "/ok", true, append(fields, [2]string{"user-agent", "h2e2e/1"})...)
	c.until(t, "the answer", func() bool { return c.ended[1] || c.reset[1] })
	h2 := parityRes{Header: c.header[1], Body: string(c.body[1])}
	h2.Status, _ = strconv.Atoi(c.status[1])

	tr, _ := e.client(t, "web.test.local", "http/1.1")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	req := newReq(t, ctx, "GET", "https://web.test.local/ok", nil)
	req.Header.Set("User-Agent", "h2e2e/1")
	for _, f := range fields {
		req.Header.Set(f[0], f[1])
	}
	res := roundTrip(t, tr, req)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	h1 := parityRes{Status: res.StatusCode, Header: res.Header, Body: string(b)}
	h1.Header.Del("Connection") // HTTP/1.1 closes after a head it could not read whole
	for _, r := range []*parityRes{&h2, &h1} {
		if r.Status != http.StatusRequestHeaderFieldsTooLarge || r.Header.Get("Content-Type") != problem.ContentType {
			t.Errorf("got %d %q %q, want a 431 problem", r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		r.normalize()
	}
	if fmt.Sprint(h2) != fmt.Sprint(h1) {
		t.Errorf("HTTP/2 and HTTP/1.1 differ:\nh2:       %+v\nhttp/1.1: %+v", h2, h1)
	}
}

// "OPTIONS *" asks about the server, not a resource: over HTTP/2 it gets
// what HTTP/1.1 gets on the same listener (net/http's answer: 200 with an
// empty body), and reaches no host.
func (e *h2Env) testOptionsStar(t *testing.T) {
	before := e.hits.Load()
	c := dialRawH2(t, e.r.g.Addrs().HTTPS, "web.test.local")
	c.open(t, 1, "OPTIONS", "*", true)
	c.until(t, "the answer", func() bool { return c.ended[1] || c.reset[1] })
	h2 := parityRes{Header: c.header[1], Body: string(c.body[1])}
	h2.Status, _ = strconv.Atoi(c.status[1])

	tc, err := tls.Dial("tcp", e.r.g.Addrs().HTTPS, &tls.Config{ServerName: "web.test.local", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(h2Wait))
	io.WriteString(tc, "OPTIONS * HTTP/1.1\r\nHost: web.test.local\r\n\r\n")
	h1 := readRaw(t, bufio.NewReader(tc), "OPTIONS")
	for _, r := range []*parityRes{&h2, &h1} {
		r.normalize()
	}
	if fmt.Sprint(h2) != fmt.Sprint(h1) {
		t.Errorf("HTTP/2 and HTTP/1.1 differ:\nh2:       %+v\nhttp/1.1: %+v", h2, h1)
	}
	if h1.Status != 200 || h1.Body != "" {
		t.Errorf("HTTP/1.1: %+v, want 200 and no body", h1)
	}
	if n := e.hits.Load() - before; n != 0 {
		t.Errorf("the host saw %d requests", n)
	}
}

// jsonStrict decodes b into v, refusing fields v does not have: a problem
// carries type, title, status and detail, and nothing else.
func jsonStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// TestH2Drain stops the gateway while HTTP/2 streams are in flight, on
// two connections: one driven frame by frame, one a Go transport. The raw
// client has an event stream and an upload open; it gets GOAWAY naming
// the last of them as processed, sends the rest of its upload after it,
// and both streams complete; a stream it opens after the GOAWAY reaches no
// host; then the connection closes. The transport's 4 MiB download,
// paused by the host at 1 MiB, completes byte-exact (the window updates it
// needs flow after the GOAWAY), and a new request on it is not sent on
// the draining connection: it fails cleanly (the listener is closed)
// without reaching the host.
func TestH2Drain(t *testing.T) {
	for _, impl := range h2Impls {
		t.Run(impl.name, func(t *testing.T) {
			e := newH2Env(t, impl.fast, false)
			k := func(s string) string { return "drain-" + s + "-" + t.Name() }
			sse, up, late, down, lateTr := e.probe(k("sse")), e.probe(k("up")), e.probe(k("late")), e.probe(k("down")), e.probe(k("late-tr"))
			c := dialRawH2(t, e.r.g.Addrs().HTTPS, "web.test.local")
			c.open(t, 1, "GET", "/sse?k="+k("sse"), true)
			c.until(t, "the first event", func() bool { return bytes.Equal(c.body[1], []byte("data: 1\n\n")) })
			upload, _ := io.ReadAll(pseudoRandom(4, 20000))
			c.open(t, 3, "PUT", "/upload?k="+k("up"), false, [2]string{"content-length", "20000"})
			c.data(t, 3, upload[:10000], false)
			await(t, up.started, "the upload to reach the host")

			tr, dials := e.client(t, "web.test.local", "h2")
			ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
			defer cancel()
			const n, pause = 4 << 20, 1 << 20
			res := roundTrip(t, tr, newReq(t, ctx, "GET", fmt.Sprintf("https://web.test.local/bytes?k=%s&n=%d&seed=7&pause=%d", k("down"), n, pause), nil))
			defer res.Body.Close()
			h := sha256.New()
			if _, err := io.CopyN(h, res.Body, pause); err != nil {
				t.Fatalf("the download's first MiB: %v", err)
			}

			e.r.cancel() // what SIGTERM does: Run drains
			c.until(t, "GOAWAY", func() bool { return c.goaway })
			if c.goCode != http2.ErrCodeNo || c.goLast != 3 {
				t.Errorf("GOAWAY %v, last stream %d; want NO_ERROR, 3 (the last stream in flight)", c.goCode, c.goLast)
			}
			// A client that ignores the GOAWAY: its new stream is past the
			// last one the gateway processes, and must reach no host.
			c.open(t, 5, "GET", "/sse?k="+k("late"), true)
			// One that honours it: the request goes to a new connection,
			// which the closed listener refuses.
			if res, err := tr.RoundTrip(newReq(t, ctx, "GET", "https://web.test.local/ok?k="+k("late-tr"), nil)); err == nil {
				res.Body.Close()
				t.Errorf("a new request on the transport during the drain: %d, want an error", res.StatusCode)
			} else if ctx.Err() != nil || dials.Load() != 2 {
				t.Errorf("a new request on the transport during the drain: %v after %d dials; want a failed second dial", err, dials.Load())
			}

			c.data(t, 3, upload[10000:], true)
			sse.letGo()
			down.letGo()
			c.until(t, "the streams in flight to end", func() bool { return (c.ended[1] || c.reset[1]) && (c.ended[3] || c.reset[3]) })
			if !c.ended[1] || c.status[1] != "200" || string(c.body[1]) != "data: 1\n\ndata: 2\n\n" {
				t.Errorf("the event stream: status %q, body %q, ended %v, reset %v; want all of it",
					c.status[1], c.body[1], c.ended[1], c.reset[1])
			}
			want := mustSum(bytes.NewReader(upload))
			if !c.ended[3] || c.status[3] != "200" || string(c.body[3]) != want {
				t.Errorf("the upload: status %q, body %q, ended %v, reset %v; want 200 %q",
					c.status[3], c.body[3], c.ended[3], c.reset[3], want)
			}
			if _, err := io.Copy(h, res.Body); err != nil {
				t.Errorf("the download after the drain began: %v", err)
			}
			if _, want, _ := sumOf(pseudoRandom(7, n)); hex.EncodeToString(h.Sum(nil)) != want {
				t.Errorf("the download: SHA-256 %x, want %s", h.Sum(nil), want)
			}
			c.until(t, "the connection to close", func() bool { return false })
			if c.status[5] != "" || len(c.body[5]) > 0 {
				t.Errorf("the stream opened after GOAWAY was answered: %q %q", c.status[5], c.body[5])
			}
			if late.seen() || lateTr.seen() {
				t.Errorf("a request sent after GOAWAY reached the host (raw %v, transport %v)", late.seen(), lateTr.seen())
			}
			select {
			case err := <-e.r.done:
				e.r.done <- err // for the cleanup's stop
				if err != nil {
					t.Errorf("Run after the drain: %v", err)
				}
			case <-time.After(h2Wait):
				t.Fatal("the gateway did not stop")
			}
		})
	}
}

// h2RawConn is an HTTP/2 client connection driven frame by frame: it shows
// what a transport hides (GOAWAY and its last stream id) and can do what
// a transport would not (open a stream after GOAWAY). Not safe for
// concurrent use.
type h2RawConn struct {
	c      *tls.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	status map[uint32]string
	header map[uint32]http.Header // the first HEADERS' regular fields
	body   map[uint32][]byte
	ended  map[uint32]bool
	reset  map[uint32]bool
	goaway bool
	goCode http2.ErrCode
	goLast uint32
	closed bool
}

func dialRawH2(t *testing.T, addr, sni string) *h2RawConn {
	t.Helper()
	d := tls.Dialer{Config: &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &h2RawConn{c: nc.(*tls.Conn), status: map[uint32]string{}, header: map[uint32]http.Header{}, body: map[uint32][]byte{}, ended: map[uint32]bool{}, reset: map[uint32]bool{}}
	t.Cleanup(func() { c.c.Close() })
	if p := c.c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	_ = c.c.SetWriteDeadline(time.Now().Add(h2Wait))
	c.fr = http2.NewFramer(c.c, c.c)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(c.c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// open opens stream id with a request for path at the connection's
// server name, and extra fields.
func (c *h2RawConn) open(t *testing.T, id uint32, method, path string, endStream bool, extra ...[2]string) {
	t.Helper()
	c.hbuf.Reset()
	fields := append([][2]string{{":method", method}, {":scheme", "https"}, {":authority", c.c.ConnectionState().ServerName}, {":path", path}}, extra...)
	for _, f := range fields {
		_ = c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// Frames of at most 16 KiB, the size every server takes: HEADERS,
	// then CONTINUATION.
	const max = 16 << 10
	b := c.hbuf.Bytes()
	first := b[:min(len(b), max)]
	b = b[len(first):]
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(b) == 0})
	for err == nil && len(b) > 0 {
		n := min(len(b), max)
		err = c.fr.WriteContinuation(id, n == len(b), b[:n])
		b = b[n:]
	}
	if err != nil {
		t.Fatalf("opening stream %d: %v", id, err)
	}
}

// data sends p on stream id, within the initial windows (64 KiB).
func (c *h2RawConn) data(t *testing.T, id uint32, p []byte, endStream bool) {
	t.Helper()
	if err := c.fr.WriteData(id, endStream, p); err != nil {
		t.Fatalf("data on stream %d: %v", id, err)
	}
}

// until reads frames until cond holds or the connection ends, within
// h2Wait; it fails t if neither happens in time, or if the connection
// ends first while cond does not hold (cond always false: wait for the
// end).
func (c *h2RawConn) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(h2Wait))
	for !cond() && !c.closed {
		f, err := c.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("waiting for %s: nothing for %v", what, h2Wait)
		case err != nil:
			c.closed = true
			continue
		}
		c.record(f)
	}
	if !cond() && what != "the connection to close" {
		t.Fatalf("the connection closed before %s", what)
	}
}

func (c *h2RawConn) record(f http2.Frame) {
	id := f.Header().StreamID
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = c.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		c.goaway, c.goCode, c.goLast = true, f.ErrCode, f.LastStreamID
	case *http2.MetaHeadersFrame:
		if c.status[id] == "" {
			c.status[id] = f.PseudoValue("status")
			c.header[id] = http.Header{}
			for _, hf := range f.RegularFields() {
				c.header[id].Add(hf.Name, hf.Value)
			}
		}
		c.ended[id] = c.ended[id] || f.StreamEnded()
	case *http2.DataFrame:
		c.body[id] = append(c.body[id], f.Data()...)
		c.ended[id] = c.ended[id] || f.StreamEnded()
	case *http2.RSTStreamFrame:
		c.reset[id] = true
	}
}
