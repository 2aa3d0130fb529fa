package edge

import (
	"strconv"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestPassthroughForgetsDeletedApps: the round-robin counters of
// passthrough apps that left the table go at the table's sweep, however
// many came and went; that of an app still there stays.
func TestPassthroughForgetsDeletedApps(t *testing.T) {
	live := &route.Live{}
	b := route.NewBuilder(live)
	b.PutZone(&route.Zone{Name: zone}, 1)
	const gone = 1000
	ids := []string{"stay"}
	for i := range gone {
		ids = append(ids, "app"+strconv.Itoa(i))
	}
	for i, id := range ids {
		b.PutApp(&route.App{ID: id, Mode: route.ModePassthrough, Status: route.StatusActive})
		b.SetHost(&route.Host{ID: "h" + strconv.Itoa(i), Apps: []string{id}, Addr: "127.0.0.1:1", Scheme: "tls", State: route.HostVerified})
	}
	p := NewPassthrough(live, nil, nil)
	for _, id := range ids {
		if _, ok := p.Route(id + "." + zone); !ok {
			t.Fatalf("%s: not piped", id)
		}
	}
	held := func() map[string]bool {
		m := map[string]bool{}
		p.HeldApps(func(id string) bool { m[id] = true; return true })
		return m
	}
	if n := len(held()); n != gone+1 {
		t.Fatalf("counters before the deletes = %d, want %d", n, gone+1)
	}
	for _, id := range ids[1:] {
		b.DeleteApp(id)
	}
	f := route.NewForget(live, time.Minute, p)
	t0 := time.Now()
	f.Sweep(t0)
	f.Sweep(t0.Add(time.Minute))
	if got := held(); len(got) != 1 || !got["stay"] {
		t.Fatalf("counters after the sweep = %d, want stay's alone", len(got))
	}
}
