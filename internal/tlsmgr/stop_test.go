package tlsmgr

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// fileKV is certmagic's file storage as a KV, for a Manager given
// Options.Storage (as the gateway gives it its store).
type fileKV struct{ *certmagic.FileStorage }

func (f fileKV) Stat(ctx context.Context, key string) (time.Time, int64, bool, error) {
	ki, err := f.FileStorage.Stat(ctx, key)
	return ki.Modified, ki.Size, ki.IsTerminal, err
}

// slowCleanup is a DNS provider whose DeleteRecords takes a while, as a
// store over the network does, and says when a record was added and
// when one was removed.
type slowCleanup struct {
	*tlsmgrtest.Zones
	appended chan struct{}
	deleted  atomic.Bool
}

func (s *slowCleanup) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	out, err := s.Zones.AppendRecords(ctx, zone, recs)
	select {
	case s.appended <- struct{}{}:
	default:
	}
	return out, err
}

func (s *slowCleanup) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	time.Sleep(300 * time.Millisecond)
	out, err := s.Zones.DeleteRecords(ctx, zone, recs)
	s.deleted.Store(true)
	return out, err
}

// TestStopWaitsForOrderCleanup: a Run stopped while an order's DNS-01
// challenge record is out returns only once the order has ended: its
// challenge record removed and its storage lock released. It returned
// at once, leaving certmagic's order to remove the record (and hold the
// lock, refreshing it) in the background: the gateway then closed its
// bus under it, and the record was left for the next sweep while the
// goroutines ran on for up to certmagic's two-minute cleanup timeout.
func TestStopWaitsForOrderCleanup(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	p.DNS.AddZone(own(t, "example.test"))
	opts := acmeOptions(p, r, "", own(t, "*.example.test"))
	opts.Storage = fileKV{&certmagic.FileStorage{Path: t.TempDir()}}
	dns := &slowCleanup{Zones: p.DNS, appended: make(chan struct{}, 1)}
	opts.DNSProvider = dns
	opts.DNSResolvers = []string{p.DNSAddr}
	// Long enough that the order is still waiting when the stop comes.
	opts.DNSPropagationDelay = 10 * time.Second
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-dns.appended:
	case <-time.After(tlsmgrtest.IssueTimeout):
		cancel()
		<-done
		t.Fatal("no challenge record was written")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
	if !dns.deleted.Load() {
		t.Fatal("Run returned before the stopped order removed its challenge record")
	}
	if txt := p.DNS.TXT(own(t, "_acme-challenge.example.test")); len(txt) != 0 {
		t.Fatalf("challenge records left behind: %v", txt)
	}
}

// TestStopDuringOnDemandRenewal: a stop while a custom domain's
// certificate, due for renewal, is being renewed (the CA still
// validating) returns at once and leaves no renewal behind. certmagic ran
// that renewal on a goroutine of its own with a context of its own (5
// minutes): Run waited ordersStopWait (10 s) for its storage lock, logged
// that an order was still ending, and returned with the renewal still
// polling the CA, to go on for minutes against a store the gateway had
// closed. That holds too when the due certificate is loaded by the
// background order rather than the handshake (the handshake's read of
// the store failed once): certmagic's load in the order started the same
// renewal of its own.
//
// Not parallel: renewalsRunning reads every goroutine of the process, and
// another test's renewal would be taken for this one's.
func TestStopDuringOnDemandRenewal(t *testing.T) {
	for _, tc := range []struct {
		name      string
		readFails bool // the handshake's read of the stored key fails once
	}{
		{"cached", false},
		{"loaded by the order", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testStopDuringOnDemandRenewal(t, tc.readFails) })
	}
}

// failsOnce is a store whose first read of key fails, as a store over the
// network times out now and then.
type failsOnce struct {
	fileKV
	key    string
	failed atomic.Bool
}

func (f *failsOnce) Load(ctx context.Context, key string) ([]byte, error) {
	if key == f.key && f.failed.CompareAndSwap(false, true) {
		return nil, errors.New("store read timed out")
	}
	return f.fileKV.Load(ctx, key)
}

func testStopDuringOnDemandRenewal(t *testing.T, readFails bool) {
	const name = "due.customer.test"
	r := newRig(t)
	// The CA's validation waits on this; Pebble gives up on it after 10 s.
	r.slowHost, r.slowBy = name, time.Minute
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	seeded := seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
	opts := acmeOptions(p, r, "", "api.example.test")
	opts.Storage = fileKV{&certmagic.FileStorage{Path: dir}}
	if readFails {
		key := certmagic.StorageKeys.SitePrivateKey((&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey(), name)
		opts.Storage = &failsOnce{fileKV: fileKV{&certmagic.FileStorage{Path: dir}}, key: key}
	}
	opts.CustomDomains = CustomDomainsAuto
	opts.DisableTLSALPNChallenge = true // HTTP-01 only: the slow one
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	logs := new(testutil.SyncBuffer)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.serve(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	r.issued(t, p, m, "api.example.test") // the ACME account exists: orders from here on are the name's
	before := p.Orders()

	addr := serveTLS(t, m.TLSConfig())
	leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Equal(seeded) {
		t.Fatalf("served %v, want the stored certificate while it is renewed", leaf.DNSNames)
	}
	testutil.WaitFor(t, 30*time.Second, func() bool { return p.Orders() > before }, "the due certificate's renewal placed no order")
	time.Sleep(500 * time.Millisecond) // the renewal waits on the CA's validation

	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
	took := time.Since(began)
	t.Logf("Run returned %v after the stop", took)
	if took > 3*time.Second {
		t.Errorf("Run took %v to return after the stop, want under 3s", took)
	}
	if strings.Contains(logs.String(), "order still ending") {
		t.Errorf("Run returned with the renewal still running:\n%s", logs.String())
	}
	// Run has returned: nothing of the renewal may run on.
	if g := renewalsRunning(); g != "" {
		t.Fatalf("a renewal still runs after Run returned:\n%s", g)
	}
}

// renewalsRunning returns the stacks of the goroutines in certmagic's
// renewal code.
func renewalsRunning() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "certmagic.(*Config).renewCert") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// TestStopDuringOnDemandOrderReleasesHandshakes: a custom domain whose
// stored certificate has expired is renewed by an order in the background,
// which the handshakes for the name meanwhile wait for (at most their
// bound, 8 s: TestACMEExpiredRenewalKeepsTheHandshakeBound). A stop
// cancels the order, which releases them at once: Run returns promptly,
// and so do the handshakes, rather than when their bound ends while the
// order goes on.
func TestStopDuringOnDemandOrderReleasesHandshakes(t *testing.T) {
	t.Parallel()
	name := own(t, "lapsed.customer.test")
	r := newRig(t)
	r.slowHost, r.slowBy = name, time.Minute // Pebble gives up after 10 s
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	writeExpired(t, dir, p.Directory, name)
	opts := acmeOptions(p, r, "", own(t, "api.example.test"))
	opts.Storage = fileKV{&certmagic.FileStorage{Path: dir}}
	opts.CustomDomains = CustomDomainsAuto
	opts.DisableTLSALPNChallenge = true
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.serve(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	r.issued(t, p, m, own(t, "api.example.test"))
	before := p.Orders()

	addr := serveTLS(t, m.TLSConfig())
	ended := make(chan time.Time, 3)
	for range 3 {
		go func() {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr,
				&tls.Config{ServerName: name, InsecureSkipVerify: true})
			if err == nil {
				c.Close()
			}
			ended <- time.Now()
		}()
	}
	testutil.WaitFor(t, 30*time.Second, func() bool { return p.Orders() > before }, "the expired certificate's renewal placed no order")
	time.Sleep(time.Second) // the handshakes wait on the order

	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Run took %v to return after the stop, want under 3s", took)
	}
	for i := range 3 {
		at := <-ended
		if took := at.Sub(began); took > 3*time.Second {
			t.Errorf("handshake %d ended %v after the stop, want under 3s", i+1, took)
		}
	}
}
