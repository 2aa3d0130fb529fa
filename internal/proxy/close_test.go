package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestCloseLeavesNoH2CConnection: a request to an h2c host that is still
// in flight when Close is called (the gateway's drain cut its client and
// its handler has not returned yet) leaves no connection to the host
// open, however it ends, and nothing dials the host after Close. The
// HTTP/2 pool closed only the connections idle at Close, and the one the
// request ended on afterwards stayed open for the idle timeout, after the
// gateway had stopped.
func TestCloseLeavesNoH2CConnection(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var opened, closed atomic.Int32
	host := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	host.Config.Protocols = new(http.Protocols)
	host.Config.Protocols.SetUnencryptedHTTP2(true)
	host.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	host.Start()
	t.Cleanup(host.Close)

	p, err := New(Options{IdleConnTimeout: time.Minute})
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
		Scheme: "h2c", URL: &url.URL{Scheme: "http", Host: addr}, State: route.HostVerified})
	send := func() int {
		r := httptest.NewRequest(http.MethodGet, "http://hello.apps.test/", nil)
		tb := live.Load()
		rq := &route.Request{ID: "rid-1", Table: tb, Match: tb.Lookup(r.Host), ClientIP: netip.MustParseAddr("192.0.2.7")}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r.WithContext(route.WithRequest(r.Context(), rq)))
		return w.Code
	}

	done := make(chan int, 1)
	go func() { done <- send() }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the host")
	}
	p.Close()
	close(release) // the host answers, if the connection still stands
	select {
	case code := <-done:
		t.Logf("the request in flight at Close: %d", code)
	case <-time.After(10 * time.Second):
		t.Fatal("the request in flight at Close never ended")
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return closed.Load() == opened.Load() },
		"a connection to the h2c host stayed open after Close")
	if code := send(); code < 500 {
		t.Errorf("a request after Close: %d, want the host unreachable", code)
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("the host saw %d connections, want 1 (none dialled after Close)", n)
	}
}
