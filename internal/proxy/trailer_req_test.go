package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestRequestTrailersReachHost: a request with a content-length and
// trailer fields (an HTTP/2 client's upload with a checksum) reaches an
// HTTP/1.1 host chunked, the one framing HTTP/1.1 carries trailers in,
// and an h2c host with its length kept: HTTP/2 carries both, and a host
// that reads the length (to refuse an upload too large before it comes,
// or to answer 411) lost it for nothing.
func TestRequestTrailersReachHost(t *testing.T) {
	for _, c := range []struct {
		scheme string
		length int64 // the content length the host sees
	}{
		{"http", -1},
		{"h2c", 5},
	} {
		t.Run(c.scheme, func(t *testing.T) {
			var mu sync.Mutex
			var got string
			host := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				mu.Lock()
				got = fmt.Sprintf("%s length %d read %d checksum %q", r.Proto, r.ContentLength, n, r.Trailer.Get("X-Checksum"))
				mu.Unlock()
			}))
			if c.scheme == "h2c" {
				host.Config.Protocols = new(http.Protocols)
				host.Config.Protocols.SetUnencryptedHTTP2(true)
			}
			host.Start()
			t.Cleanup(host.Close)

			p, err := New(Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			live := new(route.Live)
			b := route.NewBuilder(live)
			b.Replace(route.State{
				Zones: []*route.Zone{{Name: "apps.test"}},
				Apps:  []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive}},
			})
			addr := host.Listener.Addr().String()
			b.SetHost(&route.Host{ID: "h1", Apps: []string{"hello"}, Addr: addr, Dial: addr,
				Scheme: c.scheme, URL: &url.URL{Scheme: "http", Host: addr}, State: route.HostVerified})

			r := httptest.NewRequest(http.MethodPost, "http://hello.apps.test/upload", strings.NewReader("hello"))
			r.ContentLength = 5
			r.Trailer = http.Header{"X-Checksum": {"c0ffee"}}
			tb := live.Load()
			rq := &route.Request{ID: "rid-1", Table: tb, Match: tb.Lookup(r.Host), ClientIP: netip.MustParseAddr("192.0.2.7")}
			w := httptest.NewRecorder()
			p.ServeHTTP(w, r.WithContext(route.WithRequest(r.Context(), rq)))
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			proto := "HTTP/1.1"
			if c.scheme == "h2c" {
				proto = "HTTP/2.0"
			}
			mu.Lock()
			defer mu.Unlock()
			if want := fmt.Sprintf("%s length %d read 5 checksum %q", proto, c.length, "c0ffee"); got != want {
				t.Errorf("the host saw %s, want %s", got, want)
			}
		})
	}
}
