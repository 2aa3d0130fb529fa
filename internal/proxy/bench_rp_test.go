package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// BenchmarkReverseProxyGet is a GET through the ReverseProxy path (the
// fast path off) to a kept-alive host, plain and over TLS: the cost per
// request of the h1 transport's connection wrapper.
func BenchmarkReverseProxyGet(b *testing.B) {
	for _, tlsOn := range []bool{false, true} {
		name := "http"
		if tlsOn {
			name = "https"
		}
		b.Run(name, func(b *testing.B) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "5")
				_, _ = io.WriteString(w, "hello")
			})
			var host *httptest.Server
			if tlsOn {
				host = httptest.NewUnstartedServer(h)
				host.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
				host.StartTLS()
			} else {
				host = httptest.NewServer(h)
			}
			defer host.Close()
			p, err := New(Options{ClusterID: "c1", DisableFastPath: true})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			live := new(route.Live)
			bl := route.NewBuilder(live)
			bl.Replace(route.State{
				Zones: []*route.Zone{{Name: "apps.test"}},
				Apps:  []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive}},
			})
			u, _ := url.Parse(host.URL)
			bl.SetHost(&route.Host{ID: "h1", Apps: []string{"hello"}, Addr: u.Host, Scheme: u.Scheme, URL: u, State: route.HostVerified})
			tb := live.Load()
			in := httptest.NewRequest(http.MethodGet, "http://hello.apps.test/", nil)
			b.ReportAllocs()
			for b.Loop() {
				rq := &route.Request{ID: "rid-1", Table: tb, Match: tb.Lookup(in.Host), ClientIP: netip.MustParseAddr("192.0.2.7")}
				w := httptest.NewRecorder()
				p.ServeHTTP(w, in.WithContext(route.WithRequest(in.Context(), rq)))
				if w.Code != 200 {
					b.Fatalf("status %d %q", w.Code, w.Body.String())
				}
			}
		})
	}
}
