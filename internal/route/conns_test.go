package route

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Which table changes end the connections open to an app and a host.
func TestTableCuts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		app  *App  // nil: deleted
		host *Host // nil: removed
		via  string
		want string
	}{
		{"serving", &App{ID: "a", Status: StatusActive}, &Host{ID: "h", State: HostVerified}, "h", ""},
		{"suspended", &App{ID: "a", Status: StatusSuspended}, &Host{ID: "h", State: HostVerified}, "h", "suspended"},
		{"retired", &App{ID: "a", Status: StatusRetired}, &Host{ID: "h", State: HostVerified}, "h", "retired"},
		{"deleted", nil, &Host{ID: "h", State: HostVerified}, "h", "deleted"},
		{"host revoked", &App{ID: "a", Status: StatusActive}, &Host{ID: "h", State: HostProvisional, Refused: true}, "h", "revoked"},
		{"host removed", &App{ID: "a", Status: StatusActive}, nil, "h", ""},
		{"host draining", &App{ID: "a", Status: StatusActive}, &Host{ID: "h", State: HostDraining}, "h", ""},
		{"host unhealthy", &App{ID: "a", Status: StatusActive}, &Host{ID: "h", State: HostUnhealthy}, "h", ""},
		{"host failed a check", &App{ID: "a", Status: StatusActive}, &Host{ID: "h", State: HostProvisional}, "h", ""},
		{"through a peer cluster", &App{ID: "a", Status: StatusActive}, nil, "", ""},
		{"through a peer cluster, suspended", &App{ID: "a", Status: StatusSuspended}, nil, "", "suspended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := &Live{}
			b := NewBuilder(live)
			if tc.app != nil {
				b.PutApp(tc.app)
			}
			b.SetHost(&Host{ID: "g", State: HostVerified}) // sorts before h
			if tc.host != nil {
				tc.host.Apps = []string{"a"}
				b.SetHost(tc.host)
			}
			b.SetHost(&Host{ID: "i", State: HostVerified}) // and after
			if got := live.Load().Cuts("a", tc.via); got != tc.want {
				t.Errorf("Cuts = %q, want %q", got, tc.want)
			}
		})
	}
}

// Conns closes exactly the connections a table cuts, each once, reports
// them by app and host, and refuses to hold one the current table
// already cuts.
func TestConnsCut(t *testing.T) {
	t.Parallel()
	live := &Live{}
	b := NewBuilder(live)
	for _, id := range []string{"a", "b", "c"} {
		b.PutApp(&App{ID: id, Status: StatusActive})
	}
	b.SetHost(&Host{ID: "h1", Apps: []string{"a", "b"}, State: HostVerified})
	b.SetHost(&Host{ID: "h2", Apps: []string{"a", "c"}, State: HostVerified})
	s := NewConns(live)
	closed := map[string]*atomic.Int32{}
	hold := func(name, app, host string) *Conn {
		n := new(atomic.Int32)
		closed[name] = n
		c, ok := s.Add(app, host, closer(func() { n.Add(1) }))
		if !ok {
			t.Fatalf("%s not held", name)
		}
		return c
	}
	hold("a@h1", "a", "h1")
	hold("a@h2", "a", "h2")
	hold("b@h1", "b", "h1")
	hold("c@h2", "c", "h2")
	hold("c@peer", "c", "")
	gone := hold("b@h1 ended", "b", "h1")
	gone.Release()
	gone.Release() // twice: a no-op

	b.PutApp(&App{ID: "a", Status: StatusSuspended})
	b.SetHost(&Host{ID: "h1", Apps: []string{"a", "b"}, State: HostProvisional, Refused: true})
	got := s.Cut(live.Load())
	want := []Cut{{App: "a", Why: "suspended", N: 2}, {Host: "h1", Why: "revoked", N: 1}}
	if len(got) != len(want) {
		t.Fatalf("cuts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cut %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for name, wantN := range map[string]int32{"a@h1": 1, "a@h2": 1, "b@h1": 1, "c@h2": 0, "c@peer": 0, "b@h1 ended": 0} {
		if n := closed[name].Load(); n != wantN {
			t.Errorf("%s closed %d times, want %d", name, n, wantN)
		}
	}
	if n := s.Len(); n != 2 {
		t.Errorf("%d held after the cut, want 2", n)
	}
	if again := s.Cut(live.Load()); len(again) != 0 {
		t.Errorf("a second sweep of the same table cut %+v", again)
	}
	// Routed by an older table: the current one already cuts it.
	if _, ok := s.Add("a", "h2", closer(func() { t.Error("closed by Conns") })); ok {
		t.Error("held a connection to a suspended app")
	}
	if n := s.Len(); n != 2 {
		t.Errorf("%d held, want 2", n)
	}
}

// Run sweeps each new table and reports what it cut.
func TestConnsRun(t *testing.T) {
	t.Parallel()
	live := &Live{}
	b := NewBuilder(live)
	b.PutApp(&App{ID: "a", Status: StatusActive})
	s := NewConns(live)
	closed := make(chan struct{})
	if _, ok := s.Add("a", "", closer(func() { close(closed) })); !ok {
		t.Fatal("not held")
	}
	reports := make(chan Cut, 1)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, time.Millisecond, func(c Cut) { reports <- c }) }()
	defer func() { cancel(); <-ran }()
	b.DeleteApp("a")
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed 5s after its app was deleted")
	}
	if c := <-reports; c != (Cut{App: "a", Why: "deleted", N: 1}) {
		t.Errorf("reported %+v", c)
	}
}

// closer is an io.Closer that calls itself.
type closer func()

func (f closer) Close() error { f(); return nil }

// BenchmarkConnsHold is what holding one connection costs: Add and
// Release, with other connections of the same app open meanwhile.
func BenchmarkConnsHold(b *testing.B) {
	live := &Live{}
	bl := NewBuilder(live)
	bl.PutApp(&App{ID: "a", Status: StatusActive})
	bl.SetHost(&Host{ID: "h", Apps: []string{"a"}, State: HostVerified})
	s := NewConns(live)
	nop := closer(func() {})
	for range 100 {
		s.Add("a", "h", nop)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, _ := s.Add("a", "h", nop)
		c.Release()
	}
}
