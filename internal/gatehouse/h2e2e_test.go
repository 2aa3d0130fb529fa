package gatehouse

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// The whole gateway over HTTP/2, end to end: a client speaking h2 to the
// https listener, every layer of the chain, and real hosts behind it (one
// HTTP/1.1, one h2c). Each test runs against gatehouse's own HTTP/2 server
// (listeners.fast_path on) and net/http's (off), and asserts the same
// observable behaviour of both. This file holds the gateway, the hosts and
// the clients; the cases are in h2grpc_test.go, h2stream_test.go,
// h2refusal_test.go and h2drain_test.go.

// h2Wait bounds every wait in these tests: a gateway that holds a byte
// back fails the test instead of hanging it.
const h2Wait = 10 * time.Second

// h2BulkWait bounds the transfers of many MiB instead: under -race, with
// other tests on the same two cores, the 80 MiB of the bulk case have
// taken over 20 s (11 s on a quiet machine), and a bound is not a speed
// test.
const h2BulkWait = 90 * time.Second

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
	fast   bool // listeners.fast_path: gatehouse's HTTP/2 server, else net/http's
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
	e := &h2Env{r: start(t, cfg), fast: fast, issuer: priv}
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
		// The last 1000 bytes come a moment after the rest, so the
		// gateway reads them on their own: a tail smaller than any
		// server's write buffer, which must reach the client before
		// the reset all the same.
		io.WriteString(w, strings.Repeat("s", 29000))
		rc.Flush()
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, strings.Repeat("s", 1000))
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
// hosts that fail or answer early, large header blocks, and the gateway's
// own answers (refusals, OPTIONS *) as HTTP/1.1 gets them.
func TestH2EndToEnd(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	for _, impl := range h2Impls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel() // each HTTP/2 server on a gateway of its own
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
