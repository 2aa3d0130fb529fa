package tlsmgr

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"

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
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	p.DNS.AddZone("example.test")
	opts := acmeOptions(p, r, "", "*.example.test")
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
	if txt := p.DNS.TXT("_acme-challenge.example.test"); len(txt) != 0 {
		t.Fatalf("challenge records left behind: %v", txt)
	}
}
