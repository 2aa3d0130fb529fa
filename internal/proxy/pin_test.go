package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// pinServer is a host's server at one IP: it records what reached it.
type pinServer struct {
	mu   sync.Mutex
	seen []string // "proto METHOD Host sni" of each request
}

func (s *pinServer) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func (s *pinServer) start(t *testing.T, ln net.Listener, scheme string) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sni := "-"
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		s.mu.Lock()
		s.seen = append(s.seen, r.Proto+" "+r.Method+" "+r.Host+" "+sni)
		s.mu.Unlock()
		w.Write([]byte(ln.Addr().String()))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	switch scheme {
	case "h2c":
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
	case "https":
		srv.StartTLS()
	default:
		srv.Start()
	}
	t.Cleanup(srv.Close)
}

// A host is dialed at its Dial address, the one that passed its
// challenge, never at what the name in its Addr resolves to now
// ("localhost", 127.0.0.1 here: where a rebound name would send the
// host's traffic). The TLS server name and the Host header are as they
// were: the name, and the client's own Host.
func TestProxyDialsThePinnedAddress(t *testing.T) {
	for _, scheme := range []string{"http", "h2c", "https"} {
		t.Run(scheme, func(t *testing.T) {
			lnName, lnPin, port := testutil.ListenTwin(t)
			atName, atPin := new(pinServer), new(pinServer)
			atName.start(t, lnName, scheme)
			atPin.start(t, lnPin, scheme)

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
			addr := net.JoinHostPort("localhost", port)
			u := &url.URL{Scheme: "http", Host: addr}
			if scheme == "https" {
				u.Scheme = "https"
			}
			b.SetHost(&route.Host{ID: "h1", Apps: []string{"hello"}, Addr: addr, Dial: "127.0.0.2:" + port,
				Scheme: scheme, URL: u, State: route.HostVerified})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tb := live.Load()
				rq := &route.Request{ID: "rid-1", Table: tb, Match: tb.Lookup(r.Host), ClientIP: netip.MustParseAddr("192.0.2.7")}
				p.ServeHTTP(w, r.WithContext(route.WithRequest(r.Context(), rq)))
			}))
			t.Cleanup(srv.Close)

			for _, method := range []string{"GET", "POST", "GET", "POST"} { // GET to an http host takes the fast path
				req, _ := http.NewRequest(method, srv.URL+"/x", strings.NewReader(strings.Repeat("b", len(method)-3)))
				req.Host = "hello.apps.test"
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "127.0.0.2:"+port {
					t.Fatalf("%s: %d %q, want 200 from the pinned 127.0.0.2:%s", method, resp.StatusCode, body, port)
				}
			}
			if got := atName.got(); len(got) != 0 {
				t.Fatalf("the address the name resolves to got %q", got)
			}
			got := atPin.got()
			if len(got) != 4 {
				t.Fatalf("the pinned address got %q, want 4 requests", got)
			}
			for _, g := range got {
				f := strings.Fields(g)
				if f[2] != "hello.apps.test" {
					t.Fatalf("host got Host %q, want the client's", f[2])
				}
				if scheme == "https" && f[3] != "localhost" {
					t.Fatalf("TLS server name %q, want the announced name", f[3])
				}
				if scheme == "h2c" && f[0] != "HTTP/2.0" {
					t.Fatalf("h2c host got %s", f[0])
				}
			}
		})
	}
}
