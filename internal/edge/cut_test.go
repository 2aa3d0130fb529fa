package edge

import (
	"crypto/tls"
	"io"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// An open passthrough pipe ends, within a bounded wait, once its app is
// suspended, retired or deleted, or its host's enrolment is revoked; a
// pipe of another app and host carries on. An app edited in a way that
// keeps it serving, a host draining (a drain), unhealthy or removed after
// host_ttl (missed heartbeats say the bus lost it, not the pipe) keep
// theirs.
func TestPassthroughCutWhenTakenOutOfService(t *testing.T) {
	t.Parallel()
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	otherCert, otherPool := testutil.SelfSigned(t, "other."+zone)
	h1 := startTLSHost(t, cert, echo)
	h2 := startTLSHost(t, otherCert, echo)

	active := func(id string) *route.App {
		return &route.App{ID: id, Mode: route.ModePassthrough, Status: route.StatusActive}
	}
	host1 := func() *route.Host {
		return &route.Host{ID: "h1", Apps: []string{"secure"}, Addr: h1.ln.Addr().String(), Scheme: "tls", State: route.HostVerified}
	}
	for _, tc := range []struct {
		name  string
		event func(b *route.Builder)
		cut   bool
	}{
		{"suspended", func(b *route.Builder) { a := active("secure"); a.Status = route.StatusSuspended; b.PutApp(a) }, true},
		{"retired", func(b *route.Builder) { a := active("secure"); a.Status = route.StatusRetired; b.PutApp(a) }, true},
		{"deleted", func(b *route.Builder) { b.DeleteApp("secure") }, true},
		{"host revoked", func(b *route.Builder) { h := host1(); h.State, h.Refused = route.HostProvisional, true; b.SetHost(h) }, true},
		{"host revoked while draining", func(b *route.Builder) { h := host1(); h.State, h.Refused = route.HostDraining, true; b.SetHost(h) }, true},
		{"host removed", func(b *route.Builder) { b.DeleteHost("h1") }, false},
		{"rate limit changed", func(b *route.Builder) { a := active("secure"); a.RateLimit.Requests = 5; b.PutApp(a) }, false},
		{"host draining", func(b *route.Builder) { h := host1(); h.State = route.HostDraining; b.SetHost(h) }, false},
		{"host unhealthy", func(b *route.Builder) { h := host1(); h.State = route.HostUnhealthy; b.SetHost(h) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			live := &route.Live{}
			b := route.NewBuilder(live)
			b.PutZone(&route.Zone{Name: zone}, 1)
			b.PutApp(active("secure"))
			b.PutApp(active("other"))
			b.SetHost(host1())
			b.SetHost(&route.Host{ID: "h2", Apps: []string{"other"}, Addr: h2.ln.Addr().String(), Scheme: "tls", State: route.HostVerified})
			conns := route.NewConns(live)
			e := start(t, Options{Passthrough: NewPassthrough(live, nil, conns).Route})

			mine := openPipe(t, e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
			theirs := openPipe(t, e.https, &tls.Config{ServerName: "other." + zone, RootCAs: otherPool})
			if n := conns.Len(); n != 2 {
				t.Fatalf("%d pipes held, want 2", n)
			}

			tc.event(b)
			cuts := conns.Cut(live.Load()) // what Run does on each new table
			if !tc.cut {
				if len(cuts) != 0 {
					t.Fatalf("cut %+v", cuts)
				}
				roundTrip(t, mine, "mine still open")
			} else {
				if len(cuts) != 1 || cuts[0].N != 1 {
					t.Fatalf("cut %+v, want one connection", cuts)
				}
				mine.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := mine.Read(make([]byte, 1)); err == nil || isTimeout(err) {
					t.Fatalf("pipe still open 5s after its app or host was taken out of service (read: %v)", err)
				}
				testutil.WaitFor(t, 5*time.Second, func() bool { return conns.Len() == 1 }, "cut pipe still held")
			}
			roundTrip(t, theirs, "another app's pipe")
		})
	}
}

// openPipe opens a TLS connection through the passthrough listener and
// proves it carries bytes.
func openPipe(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	c, err := dialTLS(t, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	roundTrip(t, c, "new pipe")
	return c
}

// roundTrip sends a line and reads its echo.
func roundTrip(t *testing.T, c *tls.Conn, what string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("%s: echo %q, %v", what, buf, err)
	}
}
