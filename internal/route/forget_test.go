package route

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"
)

// held is an AppState: the ids it holds, and how often each was forgotten.
type held struct {
	ids    map[string]bool
	forgot map[string]int
}

func newHeld(ids ...string) *held {
	h := &held{ids: map[string]bool{}, forgot: map[string]int{}}
	for _, id := range ids {
		h.ids[id] = true
	}
	return h
}

func (h *held) HeldApps(f func(string) bool) {
	for id := range h.ids {
		if !f(id) {
			return
		}
	}
}

func (h *held) ForgetApp(id string) { delete(h.ids, id); h.forgot[id]++ }

func (h *held) list() []string {
	var out []string
	for id := range h.ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// TestForgetSweep: state of an app gone from the table is forgotten at the
// first sweep a grace after the sweep that saw it gone, in every state
// at once; an app back in the table meanwhile, one still there and the
// state of another state holder are kept.
func TestForgetSweep(t *testing.T) {
	const grace = time.Minute
	t0 := time.Unix(1e9, 0)
	type step struct {
		at     time.Duration // after t0
		do     func(b *Builder, a, c *held)
		forgot int      // Sweep's count
		held   []string // what a holds after the sweep
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"deleted app goes after grace", []step{
			{0, func(b *Builder, a, c *held) { b.DeleteApp("x") }, 0, []string{"x", "y"}},
			{grace - time.Second, nil, 0, []string{"x", "y"}},
			{grace, nil, 1, []string{"y"}},
		}},
		{"app back within grace stays", []step{
			{0, func(b *Builder, a, c *held) { b.DeleteApp("x") }, 0, []string{"x", "y"}},
			{30 * time.Second, func(b *Builder, a, c *held) { b.PutApp(&App{ID: "x"}) }, 0, []string{"x", "y"}},
			{2 * grace, nil, 0, []string{"x", "y"}},
		}},
		{"app back then gone again is timed anew", []step{
			{0, func(b *Builder, a, c *held) { b.DeleteApp("x") }, 0, []string{"x", "y"}},
			{30 * time.Second, func(b *Builder, a, c *held) { b.PutApp(&App{ID: "x"}) }, 0, []string{"x", "y"}},
			{45 * time.Second, func(b *Builder, a, c *held) { b.DeleteApp("x") }, 0, []string{"x", "y"}},
			{grace + 30*time.Second, nil, 0, []string{"x", "y"}},
			{grace + 45*time.Second, nil, 1, []string{"y"}},
		}},
		{"app never seen in a table", []step{
			{0, func(b *Builder, a, c *held) { a.ids["brief"] = true }, 0, []string{"brief", "x", "y"}},
			{grace, nil, 1, []string{"x", "y"}},
		}},
		{"state made again after the forget", []step{
			{0, func(b *Builder, a, c *held) { b.DeleteApp("x") }, 0, []string{"x", "y"}},
			{grace, nil, 1, []string{"y"}},
			{grace + time.Second, func(b *Builder, a, c *held) { a.ids["x"] = true }, 0, []string{"x", "y"}},
			{2*grace + time.Second, nil, 1, []string{"y"}},
		}},
		{"held by the other state only", []step{
			{0, func(b *Builder, a, c *held) { b.DeleteApp("z"); c.ids["z"] = true }, 0, []string{"x", "y"}},
			{grace, nil, 1, []string{"x", "y"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var live Live
			b := NewBuilder(&live)
			b.Replace(State{Apps: []*App{{ID: "x"}, {ID: "y"}, {ID: "z"}}})
			a, c := newHeld("x", "y"), newHeld("y")
			f := NewForget(&live, grace, a, c)
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(b, a, c)
				}
				if n := f.Sweep(t0.Add(s.at)); n != s.forgot {
					t.Errorf("step %d: forgot %d apps, want %d", i, n, s.forgot)
				}
				if got := a.list(); !slices.Equal(got, s.held) {
					t.Errorf("step %d: held %v, want %v", i, got, s.held)
				}
			}
			for id, n := range a.forgot {
				if c.forgot[id] != n {
					t.Errorf("%s forgotten %d times in one state, %d in the other", id, n, c.forgot[id])
				}
			}
			if len(c.ids) != 1 || !c.ids["y"] {
				t.Errorf("other state holds %v, want y", c.list())
			}
		})
	}
}

// TestForgetRunStops: Run returns when its context ends.
func TestForgetRunStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewForget(&Live{}, 0).Run(ctx, 0) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
