package cluster

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/owners.json from the current code")

type vector struct {
	App        string   `json:"app"`
	IDs        []string `json:"ids"`
	ModN       string   `json:"modn"`
	Rendezvous string   `json:"rendezvous"`
}

func readVectors(t *testing.T, name string) []vector {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(vs) == 0 {
		t.Fatalf("%s: no vectors", name)
	}
	return vs
}

func checkVectors(t *testing.T, vs []vector) {
	t.Helper()
	for _, v := range vs {
		in := slices.Clone(v.IDs)
		if got := Owner(v.App, v.IDs); got != v.ModN {
			t.Errorf("Owner(%q, %q) = %q, want %q", v.App, v.IDs, got, v.ModN)
		}
		if got := Rendezvous(v.App, v.IDs); got != v.Rendezvous {
			t.Errorf("Rendezvous(%q, %q) = %q, want %q", v.App, v.IDs, got, v.Rendezvous)
		}
		if !slices.Equal(in, v.IDs) {
			t.Errorf("Owner modified its ids: %q -> %q", in, v.IDs)
		}
		peers := make([]Peer, len(v.IDs))
		for i, id := range v.IDs {
			peers[i] = Peer{ID: id, Active: true}
		}
		self := ""
		if len(v.IDs) > 0 {
			self = v.IDs[0]
		}
		s := NewSet(self, peers)
		if got := s.Owner(v.App, HashModN); got != v.ModN {
			t.Errorf("Set.Owner(%q, modn) over %q = %q, want %q", v.App, v.IDs, got, v.ModN)
		}
		if got := s.Owner(v.App, HashRendezvous); got != v.Rendezvous {
			t.Errorf("Set.Owner(%q, rendezvous) over %q = %q, want %q", v.App, v.IDs, got, v.Rendezvous)
		}
	}
}

// TestOwnerPythonVectors checks the Go code against an independent
// computation of DESIGN §5.1 by Python's hashlib (testdata/owners.py).
func TestOwnerPythonVectors(t *testing.T) {
	checkVectors(t, readVectors(t, "testdata/owners_python.json"))
}

// TestOwnerVectors pins the owner of 1,000 apps over a few cluster sets;
// any change to the formula breaks every cluster's agreement and this test.
func TestOwnerVectors(t *testing.T) {
	const name = "testdata/owners.json"
	if *update {
		var vs []vector
		for _, ids := range [][]string{{"eu"}, {"eu", "us"}, {"ap", "eu", "us"}, {"ap", "eu", "sa", "us"}} {
			for i := range 250 {
				app := fmt.Sprintf("app-%d", i)
				vs = append(vs, vector{App: app, IDs: ids, ModN: Owner(app, ids), Rendezvous: Rendezvous(app, ids)})
			}
		}
		b, _ := json.MarshalIndent(vs, "", " ")
		if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkVectors(t, readVectors(t, name))
}

func TestOwnerEdges(t *testing.T) {
	tests := []struct {
		name string
		ids  []string
		want string
	}{
		{"nil", nil, ""},
		{"empty", []string{}, ""},
		{"one", []string{"eu"}, "eu"},
		{"duplicates count once", []string{"eu", "eu", "eu"}, "eu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Owner("hello", tt.ids); got != tt.want {
				t.Errorf("Owner = %q, want %q", got, tt.want)
			}
			if got := Rendezvous("hello", tt.ids); got != tt.want {
				t.Errorf("Rendezvous = %q, want %q", got, tt.want)
			}
		})
	}
	// Order of ids never matters.
	a := []string{"us", "eu", "ap", "sa"}
	b := []string{"ap", "eu", "sa", "us"}
	for i := range 1000 {
		app := fmt.Sprintf("x%d", i)
		if Owner(app, a) != Owner(app, b) || Rendezvous(app, a) != Rendezvous(app, b) {
			t.Fatalf("owner of %s depends on the order of ids", app)
		}
	}
}

func TestParseHash(t *testing.T) {
	for in, want := range map[string]Hash{"": HashModN, "modn": HashModN, "rendezvous": HashRendezvous} {
		if got, err := ParseHash(in); err != nil || got != want {
			t.Errorf("ParseHash(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseHash("crc32"); err == nil {
		t.Error("ParseHash(crc32) did not fail")
	}
}

// TestOwnerChurn measures DESIGN §5.1's claim: when a 4th cluster joins
// 3, mod-N moves about 3/4 of all apps to a new owner and rendezvous
// about 1/4. Run with -v for the numbers.
func TestOwnerChurn(t *testing.T) {
	const n = 100_000
	before := []string{"ap", "eu", "us"}
	after := []string{"ap", "eu", "sa", "us"}
	for _, tt := range []struct {
		h    Hash
		want float64
	}{{HashModN, 0.75}, {HashRendezvous, 0.25}} {
		t.Run(string(tt.h), func(t *testing.T) {
			t.Parallel()
			moved := 0
			for i := range n {
				app := fmt.Sprintf("app-%d", i)
				if tt.h.Owner(app, before) != tt.h.Owner(app, after) {
					moved++
				}
			}
			share := float64(moved) / n
			t.Logf("churn %-10s 3 -> 4 clusters: %d of %d apps moved (%.2f%%)", tt.h, moved, n, 100*share)
			if share < tt.want-0.01 || share > tt.want+0.01 {
				t.Errorf("%s churn = %.4f, want %.2f ± 0.01", tt.h, share, tt.want)
			}
		})
	}
}

func BenchmarkOwner(b *testing.B) {
	s := NewSet("eu", []Peer{{ID: "ap", Active: true}, {ID: "eu"}, {ID: "us", Active: true}})
	for _, h := range []Hash{HashModN, HashRendezvous} {
		b.Run(string(h), func(b *testing.B) {
			for b.Loop() {
				s.Owner("hello-world", h)
			}
		})
	}
}

// TestRendezvousMovesOnlyTheChangedCluster: with cluster.hash rendezvous a
// cluster joining takes apps only for itself, and one leaving gives up
// only its own: every other app keeps its owner (DESIGN §5.1: "moves about
// 1/(N+1)"). Every gateway computes the same owner from the same active
// set, whichever cluster it belongs to.
func TestRendezvousMovesOnlyTheChangedCluster(t *testing.T) {
	const n = 20_000
	three := []string{"ap", "eu", "us"}
	tests := []struct {
		name          string
		before, after []string
		changed       string
	}{
		{"sa joins", three, []string{"ap", "eu", "sa", "us"}, "sa"},
		{"eu leaves", three, []string{"ap", "us"}, "eu"},
		{"ap leaves", three, []string{"eu", "us"}, "ap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peers := make([]Peer, len(tt.after))
			for j, id := range tt.after {
				peers[j] = Peer{ID: id, Active: true}
			}
			var sets []Set // the same active clusters as each of them sees them
			for _, self := range tt.after {
				sets = append(sets, NewSet(self, peers))
			}
			moved := 0
			for i := range n {
				app := fmt.Sprintf("app-%d", i)
				was, is := Rendezvous(app, tt.before), Rendezvous(app, tt.after)
				if was != is {
					moved++
					if was != tt.changed && is != tt.changed {
						t.Fatalf("%s moved from %s to %s, neither of them %s", app, was, is, tt.changed)
					}
				}
				for _, s := range sets {
					if got := s.Owner(app, HashRendezvous); got != is {
						t.Fatalf("%s: the set of %s computes owner %s, want %s", app, s.Self(), got, is)
					}
				}
			}
			if moved == 0 {
				t.Fatal("no app moved")
			}
		})
	}
}
