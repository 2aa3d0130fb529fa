package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
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

// BenchmarkHygiene is the hygiene layer alone on a typical browser request
// carrying forged context and forwarding headers.
func BenchmarkHygiene(b *testing.B) {
	e := newEnv(b, nil)
	h := e.gw.hygiene(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	base := httptest.NewRequest("GET", "http://hello.apps.test/", nil)
	base.RemoteAddr = "192.0.2.10:51234"
	for k, v := range map[string]string{
		"User-Agent": "Mozilla/5.0", "Accept": "text/html", "Accept-Language": "en",
		"Accept-Encoding": "gzip", "Cookie": "a=b", "X-Forwarded-For": "6.6.6.6",
		"X-Gatehouse-App-Id": "forged", "X-Request-Id": "abc",
	} {
		base.Header.Set(k, v)
	}
	x := &exchange{}
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		x.Req.ClientIP = peerAddr(base.RemoteAddr)
		r := base.Clone(routeContext(base, &x.Req))
		h.ServeHTTP(w, r)
	}
}
