package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind. Its
// parallel tests mostly wait (for tokens to expire, deadlines to pass):
// more of them run at once than the CPUs (testutil.ParallelWaits).
func TestMain(m *testing.M) {
	testutil.ParallelWaits(4)
	goleak.VerifyTestMain(m)
	os.Exit(0)
}

// BenchmarkGatewayRequest is one GET through the whole chain (healthz,
// observe, route, hygiene, the edge layers, dispatch) to an in-process
// backend over a pooled loopback connection. The access log is off, as
// the allocations of the log handler are not the gateway's.
func BenchmarkGatewayRequest(b *testing.B) {
	e := newEnv(b, func(o *Options) {
		o.AccessLog = false
		o.Edge.RateLimit = 1 << 30 // the limiter runs, but never refuses
	})
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	req := serverLikeRequest(b)
	req.RemoteAddr = "192.0.2.10:51234"
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		r := req.Clone(req.Context())
		e.gw.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// serverLikeRequest is the benchmarks' GET, with a cancelable context as
// net/http's server gives every request (the proxy watches it).
func serverLikeRequest(b *testing.B) *http.Request {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return httptest.NewRequestWithContext(ctx, "GET", "http://hello.apps.test/path?q=1", nil)
}

// BenchmarkGatewayRequestParallel is BenchmarkGatewayRequest from
// GOMAXPROCS goroutines at once, all from one client address (as a load
// generator on loopback is), so that contention on shared state shows.
func BenchmarkGatewayRequestParallel(b *testing.B) {
	e := newEnv(b, func(o *Options) {
		o.AccessLog = false
		o.Edge.RateLimit = 1 << 30
	})
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	req := serverLikeRequest(b)
	req.RemoteAddr = "192.0.2.10:51234"
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			r := req.Clone(req.Context())
			e.gw.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

// BenchmarkHygiene is the hygiene layer alone on a browser's request
// (Firefox's fields on a page load) carrying forged context and forwarding
// headers, as net/http's server hands it over and as the lane does (its
// requests marked checked: no second look at the fields). The request is
// reused: what hygiene strips is put back and what it adds taken out.
func BenchmarkHygiene(b *testing.B) {
	for _, bc := range []struct {
		name string
		mark bool
	}{{"net-http", false}, {"lane", true}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b, nil)
			h := e.gw.hygiene(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "http://hello.apps.test/", nil)
			r.RemoteAddr = "192.0.2.10:51234"
			for k, v := range map[string]string{
				"User-Agent":                "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
				"Accept":                    "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
				"Accept-Language":           "en-US,en;q=0.5",
				"Accept-Encoding":           "gzip, deflate, br, zstd",
				"Cookie":                    "session=abc; theme=dark",
				"Upgrade-Insecure-Requests": "1",
				"Sec-Fetch-Dest":            "document",
				"Sec-Fetch-Mode":            "navigate",
				"Sec-Fetch-Site":            "none",
				"Sec-Fetch-User":            "?1",
				"Priority":                  "u=0, i",
				"X-Request-Id":              "abc",
			} {
				r.Header.Set(k, v)
			}
			ctx := r.Context()
			if bc.mark {
				ctx = httpwire.MarkChecked(ctx)
			}
			x := &exchange{}
			r = r.WithContext(routeContext(r.WithContext(ctx), &x.Req))
			forged := []string{"forged"}
			w := httptest.NewRecorder()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r.Header["X-Gatehouse-App-Id"] = forged
				r.Header["X-Forwarded-For"] = forged
				x.Req.ClientIP = peerAddr(r.RemoteAddr)
				h.ServeHTTP(w, r)
				delete(r.Header, "X-Forwarded-Proto")
				delete(r.Header, "X-Forwarded-Host")
				if _, ok := r.Header["X-Gatehouse-App-Id"]; ok {
					b.Fatal("a forged field went through")
				}
			}
		})
	}
}

// BenchmarkGatewayRequestAlone is BenchmarkGatewayRequest with what is not
// the gateway's taken out of the count: the backend is a raw loopback
// responder that allocates nothing, the request is reused (the headers the
// gateway adds removed after each run), and the response writer is a
// minimal one whose header map is cleared, not remade, per request. So
// allocs/op is the chain's own (in net/http's server, the response header
// map is new per request and grows past 8 fields: +3 allocations there).
func BenchmarkGatewayRequestAlone(b *testing.B) { benchAlone(b, nil) }

// BenchmarkGatewayRequestAloneAccessLog is BenchmarkGatewayRequestAlone
// with the access log on, written by a JSON handler to io.Discard; its
// allocations beyond the chain's are the slog record's and the handler's.
func BenchmarkGatewayRequestAloneAccessLog(b *testing.B) {
	benchAlone(b, slog.New(slog.NewJSONHandler(io.Discard, nil)))
}

func benchAlone(b *testing.B, log *slog.Logger) {
	e := newEnv(b, func(o *Options) {
		o.AccessLog = log != nil
		if log != nil {
			o.Logger = log
		}
		o.Edge.RateLimit = 1 << 30
	})
	addr := rawBackend(b, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello")
	e.addHost("h1", "hello", "http", "http://"+addr)
	serveRepeatedly(b, e.gw, 5)
}

// serveRepeatedly serves one GET through h for every b.Loop, as a server
// would hand it over, and fails unless each answer is a 200 of want bytes.
// A Gateway gets it as the lane hands it over: with the context
// RequestContext makes, in a Request the server reuses, the context given
// back with RequestDone. The headers the chain adds to the request are
// taken off again, so every round sees the client's request.
func serveRepeatedly(b *testing.B, h http.Handler, want int) {
	req := serverLikeRequest(b)
	req.RemoteAddr = "192.0.2.10:51234"
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	w := &benchWriter{h: http.Header{}}
	gw, _ := h.(*Gateway)
	served := new(http.Request)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		w.code, w.n = 0, 0
		if gw != nil {
			ctx := gw.RequestContext(req.Context())
			*served = *req.WithContext(ctx)
			gw.ServeHTTP(w, served)
			gw.RequestDone(ctx)
		} else {
			h.ServeHTTP(w, req)
		}
		if w.code != http.StatusOK || w.n != want {
			b.Fatalf("status %d, %d bytes", w.code, w.n)
		}
		for _, k := range [...]string{"X-Request-Id", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			delete(req.Header, k)
		}
	}
}

type benchWriter struct {
	h       http.Header
	code, n int
}

func (w *benchWriter) Header() http.Header { return w.h }

func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// rawBackend answers every request head on every connection with resp,
// allocating nothing per request. It returns its address.
func rawBackend(b *testing.B, resp string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 8<<10)
				out := []byte(resp)
				have := 0
				for {
					n, err := c.Read(buf[have:])
					if err != nil {
						return
					}
					have += n
					for {
						i := bytes.Index(buf[:have], []byte("\r\n\r\n"))
						if i < 0 {
							if have == len(buf) {
								return // a head larger than the buffer: not a benchmark request
							}
							break
						}
						if _, err := c.Write(out); err != nil {
							return
						}
						have = copy(buf, buf[i+4:have])
					}
				}
			}()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
