package dns

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libdns/libdns"
	mdns "github.com/miekg/dns"
)

// memRecords is a RecordStore in memory: fn runs under the lock, which is
// the atomicity the real store gets from compare-and-set.
type memRecords struct {
	mu     sync.Mutex
	sets   map[[3]string]*Record // zone, name, type
	writes int
	fail   error
}

func newMemRecords() *memRecords { return &memRecords{sets: map[[3]string]*Record{}} }

func (m *memRecords) UpdateRecord(_ context.Context, zone, name, typ string, fn func(*Record) (*Record, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	k := [3]string{zone, name, typ}
	var cur *Record
	if r := m.sets[k]; r != nil {
		c := *r
		c.Values = slices.Clone(r.Values)
		cur = &c
	}
	next, err := fn(cur)
	if err != nil {
		return err
	}
	m.writes++
	if next == nil {
		delete(m.sets, k)
		return nil
	}
	m.sets[k] = next
	return nil
}

func (m *memRecords) values(zone, name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.sets[[3]string{zone, name, "TXT"}]; r != nil {
		return slices.Clone(r.Values)
	}
	return nil
}

// zones is what the DNS server sees of m: the gateway's zones with m's
// records.
func (m *memRecords) zones(names ...string) func() []Zone {
	return func() []Zone {
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []Zone
		for _, n := range names {
			z := Zone{Name: n, Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
			for k, r := range m.sets {
				if k[0] == n {
					z.Records = append(z.Records, *r)
				}
			}
			out = append(out, z)
		}
		return out
	}
}

func acmeZones(t *testing.T, m *memRecords, zones ...string) *ACMEZones {
	t.Helper()
	a, err := NewACMEZones(func() []string { return zones }, m, newMemNotes())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// memNotes is a ChallengeNotes in memory, with CertKV's contract for
// missing keys and paths.
type memNotes struct {
	mu sync.Mutex
	kv map[string][]byte
}

func newMemNotes() *memNotes { return &memNotes{kv: map[string][]byte{}} }

func (n *memNotes) Load(_ context.Context, key string) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if b, ok := n.kv[key]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}

func (n *memNotes) Store(_ context.Context, key string, v []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kv[key] = slices.Clone(v)
	return nil
}

func (n *memNotes) Delete(_ context.Context, key string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.kv, key)
	return nil
}

func (n *memNotes) List(_ context.Context, path string, recursive bool) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for k := range n.kv {
		if strings.HasPrefix(k, path+"/") && (recursive || !strings.Contains(k[len(path)+1:], "/")) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fs.ErrNotExist
	}
	sort.Strings(out)
	return out, nil
}

func (n *memNotes) len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.kv)
}

func txt(name, v string) libdns.Record { return libdns.TXT{Name: name, Text: v} }

// serve runs a real server over zones on loopback and returns a TXT
// lookup against it.
func serve(t *testing.T, zones func() []Zone) func(name string) []string {
	t.Helper()
	addr := startWith(t, Options{Zones: zones})
	return func(name string) []string {
		t.Helper()
		q := new(mdns.Msg)
		q.SetQuestion(mdns.Fqdn(name), mdns.TypeTXT)
		c := &mdns.Client{Timeout: 2 * time.Second}
		resp, _, err := c.Exchange(q, addr)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Rcode != mdns.RcodeSuccess {
			t.Fatalf("%s TXT: rcode %s", name, mdns.RcodeToString[resp.Rcode])
		}
		var out []string
		for _, rr := range resp.Answer {
			out = append(out, strings.Join(rr.(*mdns.TXT).Txt, ""))
		}
		sort.Strings(out)
		return out
	}
}

// Appending writes the value beside the ones already there, the DNS
// server answers both, and deleting takes away exactly what was added.
func TestACMEZonesAppendDelete(t *testing.T) {
	m := newMemRecords()
	a := acmeZones(t, m, "apps.example.com")
	lookup := serve(t, m.zones("apps.example.com"))
	ctx := context.Background()
	const name = "_acme-challenge.apps.example.com"
	// An operator's value, written as the control API writes it.
	if err := m.UpdateRecord(ctx, "apps.example.com", name, "TXT", func(*Record) (*Record, error) {
		return &Record{Name: name, Type: "TXT", TTL: 30, Values: []string{"operator"}}, nil
	}); err != nil {
		t.Fatal(err)
	}

	// certmagic's shape: zone with a trailing dot, the name relative.
	got, err := a.AppendRecords(ctx, "apps.example.com.", []libdns.Record{libdns.RR{Type: "TXT", Name: "_acme-challenge", Data: "tok-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RR() != (libdns.RR{Type: "TXT", Name: "_acme-challenge", Data: "tok-a", TTL: 30 * time.Second}) {
		t.Fatalf("append returned %+v", got)
	}
	if _, ok := got[0].(libdns.TXT); !ok {
		t.Fatalf("append returned %T, want libdns.TXT", got[0])
	}
	// Another gateway's challenge for the same name (the apex and the
	// wildcard share it), in another spelling.
	if _, err := a.AppendRecords(ctx, "Apps.Example.com", []libdns.Record{txt("_acme-challenge.apps.example.com.", "tok-b")}); err != nil {
		t.Fatal(err)
	}
	if v := lookup(name); !slices.Equal(v, []string{"operator", "tok-a", "tok-b"}) {
		t.Fatalf("served %v", v)
	}

	del, err := a.DeleteRecords(ctx, "apps.example.com.", got)
	if err != nil || len(del) != 1 || del[0].RR().Data != "tok-a" {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	if v := lookup(name); !slices.Equal(v, []string{"operator", "tok-b"}) {
		t.Fatalf("after delete, served %v", v)
	}
	// Deleting again is a no-op that writes nothing.
	writes := m.writes
	if del, err := a.DeleteRecords(ctx, "apps.example.com.", got); err != nil || len(del) != 0 {
		t.Fatalf("second delete = %+v, %v", del, err)
	}
	if m.writes != writes {
		t.Fatal("a delete of nothing wrote")
	}
	// The set keeps its own TTL: a deleting record's TTL is not compared.
	if _, err := a.DeleteRecords(ctx, "apps.example.com.", []libdns.Record{libdns.TXT{Name: "_acme-challenge", Text: "tok-b", TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if v := m.values("apps.example.com", name); !slices.Equal(v, []string{"operator"}) {
		t.Fatalf("stored %v", v)
	}
}

// A set the provider creates is deleted with its last value, and its TTL
// is the appended record's.
func TestACMEZonesCreatesAndDeletesSet(t *testing.T) {
	m := newMemRecords()
	a := acmeZones(t, m, "apps.example.com")
	ctx := context.Background()
	got, err := a.AppendRecords(ctx, "apps.example.com.", []libdns.Record{
		libdns.TXT{Name: "_acme-challenge.api", Text: "one", TTL: 5 * time.Second},
		libdns.TXT{Name: "_acme-challenge.api", Text: "two"},
	})
	if err != nil || len(got) != 2 {
		t.Fatalf("append = %+v, %v", got, err)
	}
	m.mu.Lock()
	set := *m.sets[[3]string{"apps.example.com", "_acme-challenge.api.apps.example.com", "TXT"}]
	m.mu.Unlock()
	if set.TTL != 5 || !slices.Equal(set.Values, []string{"one", "two"}) || set.Name != "_acme-challenge.api.apps.example.com" {
		t.Fatalf("stored %+v", set)
	}
	if _, err := a.DeleteRecords(ctx, "apps.example.com.", got); err != nil {
		t.Fatal(err)
	}
	if len(m.sets) != 0 {
		t.Fatalf("left behind: %+v", m.sets)
	}
}

// The record goes to the most specific of the gateway's zones, the one
// the DNS server answers it from.
func TestACMEZonesMostSpecificZone(t *testing.T) {
	m := newMemRecords()
	a := acmeZones(t, m, "example.com", "apps.example.com")
	if _, err := a.AppendRecords(context.Background(), "example.com.", []libdns.Record{txt("_acme-challenge.apps", "v")}); err != nil {
		t.Fatal(err)
	}
	if v := m.values("apps.example.com", "_acme-challenge.apps.example.com"); !slices.Equal(v, []string{"v"}) {
		t.Fatalf("stored %+v", m.sets)
	}
}

func TestACMEZonesRefuses(t *testing.T) {
	m := newMemRecords()
	a := acmeZones(t, m, "apps.example.com")
	ctx := context.Background()
	for _, c := range []struct {
		zone string
		rec  libdns.Record
		want string
	}{
		{"example.org.", txt("_acme-challenge", "v"), "not in the gateway's zones"},
		{"example.com.", txt("_acme-challenge", "v"), "not in the gateway's zones"},
		{"evilapps.example.com.", txt("_acme-challenge", "v"), "not in the gateway's zones"},
		{"apps.example.com.", txt("_acme-challenge.example.org.", "v"), "not in zone"},
		{"apps.example.com.", txt("www", "v"), "only _acme-challenge"},
		{"apps.example.com.", txt("@", "v"), "only _acme-challenge"},
		{"apps.example.com.", txt("x._acme-challenge", "v"), "only _acme-challenge"},
		{"apps.example.com.", libdns.RR{Type: "A", Name: "_acme-challenge", Data: "127.0.0.1"}, "only TXT"},
		{"apps.example.com.", libdns.RR{Type: "CNAME", Name: "_acme-challenge", Data: "x.example.org."}, "only TXT"},
		{"apps.example.com.", txt("_acme-challenge", ""), "1 to 2048 bytes"},
		{"apps.example.com.", txt("_acme-challenge", strings.Repeat("x", 2049)), "1 to 2048 bytes"},
		{"", txt("_acme-challenge", "v"), "zone is required"},
	} {
		_, err := a.AppendRecords(ctx, c.zone, []libdns.Record{c.rec})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("append %q %+v: err %v, want %q", c.zone, c.rec.RR(), err, c.want)
		}
		_, err = a.DeleteRecords(ctx, c.zone, []libdns.Record{c.rec})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("delete %q %+v: err %v, want %q", c.zone, c.rec.RR(), err, c.want)
		}
	}
	_, err := a.AppendRecords(ctx, "example.org.", []libdns.Record{txt("_acme-challenge", "v")})
	if !errors.Is(err, ErrNotOurZone) {
		t.Errorf("off-zone: %v, want ErrNotOurZone", err)
	}
	// One bad record in a batch: nothing is written.
	if _, err := a.AppendRecords(ctx, "apps.example.com.", []libdns.Record{txt("_acme-challenge", "ok"), txt("www", "bad")}); err == nil {
		t.Error("a batch with a bad record was accepted")
	}
	if m.writes != 0 || len(m.sets) != 0 {
		t.Fatalf("refused records were written: %+v", m.sets)
	}
	// No zones at all: everything refused.
	if _, err := acmeZones(t, m).AppendRecords(ctx, "apps.example.com.", []libdns.Record{txt("_acme-challenge", "v")}); !errors.Is(err, ErrNotOurZone) {
		t.Errorf("no zones: %v", err)
	}
	if _, err := NewACMEZones(nil, m, newMemNotes()); err == nil {
		t.Error("NewACMEZones without zones")
	}
	if _, err := NewACMEZones(func() []string { return nil }, nil, newMemNotes()); err == nil {
		t.Error("NewACMEZones without records")
	}
	if _, err := NewACMEZones(func() []string { return nil }, m, nil); err == nil {
		t.Error("NewACMEZones without notes")
	}
}

// A write that fails takes back the values this call already added,
// whether the failing write, or an earlier one, would have created its set
// or added to one that holds an operator's value: what the DNS server
// answers afterwards is what it answered before.
func TestACMEZonesAppendRollsBack(t *testing.T) {
	const (
		apex = "_acme-challenge.apps.example.com"
		api  = "_acme-challenge.api.apps.example.com"
	)
	for _, tc := range []struct {
		name     string
		operator []string // names holding an operator's value beforehand
		recs     []libdns.Record
		pass     int    // appends that go through before one fails
		fails    string // the name whose append fails
	}{
		{"new sets", nil, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge.api", "two")}, 1, api},
		{"the failing append adds to a set", []string{api}, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge.api", "two")}, 1, api},
		{"the rolled-back append added to a set", []string{apex}, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge.api", "two")}, 1, api},
		{"both add to sets", []string{apex, api}, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge.api", "two")}, 1, api},
		{"both add to one set", []string{apex}, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge", "two")}, 1, apex},
		{"the first append adds to a set", []string{apex}, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge.api", "two")}, 0, apex},
		{"after two into one set", []string{apex}, []libdns.Record{txt("_acme-challenge", "one"), txt("_acme-challenge", "two"), txt("_acme-challenge.api", "three")}, 2, api},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemRecords()
			a := acmeZones(t, m, "apps.example.com")
			lookup := serve(t, m.zones("apps.example.com"))
			ctx := context.Background()
			for _, name := range tc.operator {
				if err := m.UpdateRecord(ctx, "apps.example.com", name, "TXT", func(*Record) (*Record, error) {
					return &Record{Name: name, Type: "TXT", Values: []string{"operator"}}, nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			before := map[string][]string{apex: lookup(apex), api: lookup(api)}
			boom := errors.New("store down")
			a.records = &failAfter{memRecords: m, n: tc.pass, err: boom}
			_, err := a.AppendRecords(ctx, "apps.example.com.", tc.recs)
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), "add "+tc.fails+" TXT") {
				t.Fatalf("err %v, want the store's for %s", err, tc.fails)
			}
			for name, want := range before {
				if got := lookup(name); !slices.Equal(got, want) {
					t.Errorf("%s: served %v after the failed append, %v before", name, got, want)
				}
			}
			if len(m.sets) != len(tc.operator) {
				t.Errorf("%d sets stored, want the operator's %d: %+v", len(m.sets), len(tc.operator), m.sets)
			}
			// The failed value's note alone may be left; sweeping it
			// changes no set.
			a.records = m
			if err := a.Sweep(ctx, time.Now().Add(StaleChallengeAge)); err != nil {
				t.Fatal(err)
			}
			for name, want := range before {
				if got := lookup(name); !slices.Equal(got, want) {
					t.Errorf("%s: served %v after the sweep, %v before", name, got, want)
				}
			}
			if n := a.notes.(*memNotes).len(); n != 0 {
				t.Errorf("%d notes left after the sweep", n)
			}
		})
	}
}

// failAfter lets n appends through, then fails every append, writing
// nothing; removals pass. An append is a write that leaves the set with
// more values than it had, whether it creates the set or adds to one
// (which ACMEZones does by changing the set it is given in place).
type failAfter struct {
	*memRecords
	n   int
	err error
}

func (f *failAfter) UpdateRecord(ctx context.Context, zone, name, typ string, fn func(*Record) (*Record, error)) error {
	adding := false
	err := f.memRecords.UpdateRecord(ctx, zone, name, typ, func(cur *Record) (*Record, error) {
		had := 0
		if cur != nil {
			had = len(cur.Values) // before fn, which may append to cur itself
		}
		next, err := fn(cur)
		adding = err == nil && next != nil && len(next.Values) > had
		if adding && f.n == 0 {
			return nil, f.err // an error from fn writes nothing
		}
		return next, err
	})
	if err == nil && adding {
		f.n--
	}
	return err
}

// A value whose removal never came (the gateway that added it crashed
// between certmagic's Present and CleanUp) is swept once it is older than
// the cutoff: the DNS server stops answering it, while an operator's value
// at the same name, and a challenge still in flight, stay.
func TestACMEZonesSweep(t *testing.T) {
	m := newMemRecords()
	a := acmeZones(t, m, "apps.example.com")
	notes := a.notes.(*memNotes)
	lookup := serve(t, m.zones("apps.example.com"))
	ctx := context.Background()
	const name = "_acme-challenge.apps.example.com"
	if err := m.UpdateRecord(ctx, "apps.example.com", name, "TXT", func(*Record) (*Record, error) {
		return &Record{Name: name, Type: "TXT", Values: []string{"operator"}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return t0 }
	// The crashed gateway's values: never deleted.
	if _, err := a.AppendRecords(ctx, "apps.example.com.", []libdns.Record{txt("_acme-challenge", "stale"), txt("_acme-challenge.api", "lone")}); err != nil {
		t.Fatal(err)
	}
	// A challenge another gateway has in flight, a minute later.
	a.now = func() time.Time { return t0.Add(time.Minute) }
	fresh, err := a.AppendRecords(ctx, "apps.example.com.", []libdns.Record{txt("_acme-challenge", "fresh")})
	if err != nil {
		t.Fatal(err)
	}

	// Not older than the cutoff: nothing goes.
	if err := a.Sweep(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if v := lookup(name); !slices.Equal(v, []string{"fresh", "operator", "stale"}) {
		t.Fatalf("after a sweep of nothing, served %v", v)
	}
	if err := a.Sweep(ctx, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := lookup(name); !slices.Equal(v, []string{"fresh", "operator"}) {
		t.Fatalf("after the sweep, served %v", v)
	}
	if v := lookup("_acme-challenge.api.apps.example.com"); len(v) != 0 {
		t.Fatalf("after the sweep, the api name served %v", v)
	}
	if _, ok := m.sets[[3]string{"apps.example.com", "_acme-challenge.api.apps.example.com", "TXT"}]; ok {
		t.Fatal("a set the sweep emptied is still stored")
	}
	if notes.len() != 1 {
		t.Fatalf("%d notes after the sweep, want fresh's alone", notes.len())
	}
	// Removing a value the usual way takes its note too.
	if _, err := a.DeleteRecords(ctx, "apps.example.com.", fresh); err != nil {
		t.Fatal(err)
	}
	if notes.len() != 0 {
		t.Fatalf("%d notes after CleanUp, want none", notes.len())
	}

	// A crash between the note and the record write leaves a note alone:
	// the sweep takes it and leaves the set as it is.
	m.fail = errors.New("store down")
	if _, err := a.AppendRecords(ctx, "apps.example.com.", []libdns.Record{txt("_acme-challenge", "ghost")}); err == nil {
		t.Fatal("append through a failing store succeeded")
	}
	m.fail = nil
	if notes.len() != 1 {
		t.Fatalf("%d notes after a failed write, want 1", notes.len())
	}
	if err := a.Sweep(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if v := lookup(name); !slices.Equal(v, []string{"operator"}) || notes.len() != 0 {
		t.Fatalf("after sweeping a lone note: served %v, %d notes", v, notes.len())
	}

	// A key under the notes' path that is no note is reported, not acted on.
	_ = notes.Store(ctx, notesPath+"/junk", []byte(`{"zone":"apps.example.com","name":"`+name+`","value":"operator"}`))
	if err := a.Sweep(ctx, t0.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "junk: not a challenge note") {
		t.Fatalf("sweep over junk: %v", err)
	}
	if v := lookup(name); !slices.Equal(v, []string{"operator"}) {
		t.Fatalf("a bad note changed the set: %v", v)
	}
}
