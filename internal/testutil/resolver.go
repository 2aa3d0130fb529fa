package testutil

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	mdns "github.com/miekg/dns"
)

// Resolver is a real upstream DNS resolver on loopback, UDP and TCP on one
// port, for tests of the gateway's recursion (DESIGN §8). It answers the A
// records it was given and NXDOMAIN for every other name.
type Resolver struct {
	// Addr is its host:port, UDP and TCP.
	Addr    string
	queries atomic.Int64
	mu      sync.Mutex
	records map[string]string
}

// Set points name (fully qualified, as in StartResolver) at ip from the
// next query on (Go's resolver caches nothing).
func (r *Resolver) Set(name, ip string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[strings.ToLower(name)] = ip
}

// NetResolver is a Go resolver that asks r only, over UDP.
func (r *Resolver) NetResolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", r.Addr)
	}}
}

// Queries is the number of queries it has received.
func (r *Resolver) Queries() int { return int(r.queries.Load()) }

// StartResolver serves records (a fully qualified name such as
// "example.org." → an IPv4 address) on 127.0.0.1 until the test ends.
func StartResolver(t testing.TB, records map[string]string) *Resolver {
	t.Helper()
	r := &Resolver{records: map[string]string{}}
	for name, ip := range records {
		r.records[strings.ToLower(name)] = ip
	}
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, req *mdns.Msg) {
		r.queries.Add(1)
		resp := new(mdns.Msg)
		resp.SetReply(req)
		resp.RecursionAvailable = true
		q := req.Question[0]
		r.mu.Lock()
		ip, ok := r.records[strings.ToLower(q.Name)]
		r.mu.Unlock()
		switch {
		case !ok:
			resp.Rcode = mdns.RcodeNameError
		case q.Qtype == mdns.TypeA:
			resp.Answer = append(resp.Answer, &mdns.A{
				Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 300},
				A:   net.ParseIP(ip),
			})
		}
		_ = w.WriteMsg(resp)
	})
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("testutil: no free port for UDP and TCP")
	}
	r.Addr = pc.LocalAddr().String()
	for _, srv := range []*mdns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started, done := make(chan struct{}), make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() {
			defer close(done)
			_ = srv.ActivateAndServe()
		}()
		select {
		case <-started:
		case <-done:
			t.Fatal("testutil: resolver did not start")
		}
		t.Cleanup(func() {
			_ = srv.Shutdown()
			<-done
		})
	}
	return r
}
