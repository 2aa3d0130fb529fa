package discovery_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// link is a TCP proxy to the bus that the test can take down (cut every
// connection, refuse new ones) and bring back on the same address.
type link struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newLink(t *testing.T, target string) *link {
	l := &link{t: t, target: target}
	// Not port 0: while the link is down any other test binary could
	// listen on such a port, or dial from it, and the link not come back.
	l.up(tu.FreeAddr(t))
	t.Cleanup(func() { l.down(); l.wg.Wait() })
	return l
}

func (l *link) up(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	l.ln, l.addr = ln, ln.Addr().String()
	l.mu.Unlock()
	l.wg.Go(func() { l.accept(ln) })
}

func (l *link) accept(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		l.wg.Go(func() { io.Copy(out, in); out.Close() })
		l.wg.Go(func() { io.Copy(in, out); in.Close() })
	}
}

func (l *link) down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// While the gateway is cut off from the bus, missing heartbeats say
// nothing about hosts: they stay routable (DESIGN §10), and are aged
// again from a fresh start once the gateway is back.
func TestGatewayBusOutageKeepsHosts(t *testing.T) {
	t.Parallel()
	busURL := tu.StartBus(t).ClientURL()
	l := newLink(t, strings.TrimPrefix(busURL, "nats://"))
	e := start(t, "nats://"+l.addr, func(o *discovery.Options) {})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	_, stopHost := runHost(t, busURL, "web-1", k, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	l.down()
	tu.WaitFor(t, 5*time.Second, func() bool { return e.nc.Status() != nats.CONNECTED }, "gateway still connected")
	// The host's heartbeats cannot reach us for 10 intervals; it stays.
	until := time.Now().Add(10 * hbEvery)
	tu.WaitFor(t, 20*hbEvery, func() bool {
		if !e.routable("hello", "web-1") {
			t.Fatalf("dropped during the gateway's bus outage: %+v", e.info("web-1"))
		}
		return time.Now().After(until)
	}, "")

	l.up(l.addr)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.nc.Status() == nats.CONNECTED }, "gateway did not reconnect")
	hb := e.info("web-1").LastHeartbeat
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").LastHeartbeat.After(hb) }, "heartbeats did not resume")
	if !e.routable("hello", "web-1") {
		t.Fatal("dropped after reconnect")
	}
	// And aging works again: a host that stops is dropped.
	stopHost()
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1") }, "leave not seen after reconnect")
}
