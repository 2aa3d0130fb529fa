package limit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

var alice = Subject{Issuer: "idp", Sub: "alice"}

func TestSubjectsRPS(t *testing.T) {
	clk := newClock()
	s, _ := NewSubjects(SubjectsOptions{Now: clk.Now})
	c := Claims{RPS: 3}
	for i := range 3 {
		g, err := s.Admit(alice, c)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		g.Release()
	}
	_, err := s.Admit(alice, c)
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Limit != "rps" || ref.RetryAfter <= 0 {
		t.Fatalf("fourth request: %v", err)
	}
	if _, err := s.Admit(Subject{"idp", "bob"}, c); err != nil {
		t.Fatalf("another subject shares alice's budget: %v", err)
	}
	clk.Add(2 * time.Second)
	if _, err := s.Admit(alice, c); err != nil {
		t.Fatalf("after 2s: %v", err)
	}
}

// TestSubjectsRPSPace: a subject at or under its rps is never refused,
// evenly spaced or in bursts of rps; one over it is refused within the
// first second's worth, and its retry time is when one request fits.
func TestSubjectsRPSPace(t *testing.T) {
	for _, tc := range []struct {
		rps, burst int
		every      time.Duration
		refused    bool
	}{
		{1, 1, time.Second, false},
		{3, 1, time.Second / 3, false},
		{7, 1, time.Second / 7, false}, // a step that does not divide a second
		{10, 10, time.Second, false},
		{2, 1, 400 * time.Millisecond, true},
		{10, 11, time.Second, true},
	} {
		clk := newClock()
		s, _ := NewSubjects(SubjectsOptions{Now: clk.Now})
		c := Claims{RPS: tc.rps}
		refused := false
		for step := 0; step < 20 && !refused; step++ {
			for range tc.burst {
				if _, err := s.Admit(alice, c); err != nil {
					var ref *Refusal
					if !errors.As(err, &ref) || ref.Limit != "rps" || ref.RetryAfter <= 0 || ref.RetryAfter > time.Second/time.Duration(tc.rps) {
						t.Fatalf("%+v: step %d: %v, want an rps refusal to retry within one request's time", tc, step, err)
					}
					clk.Add(ref.RetryAfter)
					if _, err := s.Admit(alice, c); err != nil {
						t.Fatalf("%+v: step %d: refused again after its RetryAfter: %v", tc, step, err)
					}
					refused = true
					break
				}
			}
			clk.Add(tc.every)
		}
		if refused != tc.refused {
			t.Errorf("%d a second, %d every %s: refused %v, want %v", tc.rps, tc.burst, tc.every, refused, tc.refused)
		}
	}
}

// TestSubjectsRPSClockStepsBack: a token's rps budget refills within a
// second, so even a small step back of the wall clock would hold a
// subject's next requests for seconds. Until the clock catches up, time
// stands still at the latest reading: what the budget held then, it holds.
func TestSubjectsRPSClockStepsBack(t *testing.T) {
	clk := newClock()
	s, _ := NewSubjects(SubjectsOptions{Now: clk.Now})
	c := Claims{RPS: 5}
	admit := func(what string) {
		t.Helper()
		g, err := s.Admit(alice, c)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		g.Release()
	}
	admit("first")
	admit("second")
	clk.Add(1500 * time.Millisecond)
	admit("in the next second")
	clk.Add(-3 * time.Second)
	// The first two are 1.5 s old, the third is now: four more fit in a
	// budget of 5, as they would at the latest reading.
	admit("fourth, after the step back")
	admit("fifth, after the step back")
	admit("sixth, after the step back")
	admit("seventh, after the step back")
	var ref *Refusal
	if _, err := s.Admit(alice, c); !errors.As(err, &ref) || ref.RetryAfter <= 0 || ref.RetryAfter > time.Second/5 {
		t.Fatalf("eighth: %v, want a refusal that says to retry within 200ms", err)
	}
}

func TestSubjectsConnections(t *testing.T) {
	s, _ := NewSubjects(SubjectsOptions{})
	c := Claims{Connections: 2}
	g1, err1 := s.Admit(alice, c)
	g2, err2 := s.Admit(alice, c)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	_, err := s.Admit(alice, c)
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Limit != "connections" {
		t.Fatalf("third connection: %v", err)
	}
	g1.Release()
	g1.Release() // idempotent
	if n := s.Active(alice); n != 1 {
		t.Fatalf("active %d after one release, want 1", n)
	}
	g3, err := s.Admit(alice, c)
	if err != nil {
		t.Fatal(err)
	}
	g2.Release()
	g3.Release()
	if n := s.Active(alice); n != 0 {
		t.Fatalf("active %d, want 0", n)
	}
}

func TestSubjectsBoundedAndPinned(t *testing.T) {
	s, _ := NewSubjects(SubjectsOptions{MaxSubjects: nshards}) // one per shard
	g, err := s.Admit(Subject{"idp", "holder"}, Claims{Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if g, err := s.Admit(Subject{"idp", string(rune('a'+i%26)) + string(rune(i))}, Claims{}); err == nil {
			g.Release()
		}
	}
	if n := s.Len(); n > nshards {
		t.Fatalf("holds %d subjects, bound %d", n, nshards)
	}
	g.Release()
	if _, err := NewSubjects(SubjectsOptions{MaxSubjects: -1}); err == nil {
		t.Fatal("negative MaxSubjects accepted")
	}
}

func TestSubjectsByteRateFollowsClaim(t *testing.T) {
	s, _ := NewSubjects(SubjectsOptions{})
	g, _ := s.Admit(alice, Claims{ReadBps: 1000, WriteBps: 5000})
	if g.Read == nil || g.Write == nil || g.Read.Limit() != 1000 || g.Write.Limit() != 5000 {
		t.Fatalf("grant %+v", g)
	}
	g.Release()
	g, _ = s.Admit(alice, Claims{WriteBps: 8000})
	if g.Read != nil || g.Write.Limit() != 8000 {
		t.Fatalf("second grant %+v", g)
	}
	g.Release()
}

// TestSubjectsPerIssuer: a subject is its (issuer, sub) pair. The same
// sub under two issuers is two budgets for every claim limit and two
// entries of the population; the same pair twice is one. No pair may
// collide with another through a separator in its strings.
func TestSubjectsPerIssuer(t *testing.T) {
	cases := []struct {
		name   string
		first  Subject
		second Subject
		shared bool
	}{
		{"same issuer and sub", Subject{"tenant-a", "user1"}, Subject{"tenant-a", "user1"}, true},
		{"same sub, other issuer", Subject{"tenant-a", "user1"}, Subject{"tenant-b", "user1"}, false},
		{"separator moved between the two", Subject{"a|b", "c"}, Subject{"a", "b|c"}, false},
		{"empty issuer against empty sub", Subject{"", "ab"}, Subject{"ab", ""}, false},
		{"same sub, other issuer, prefix", Subject{"idp", "x"}, Subject{"idp2", "x"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			s, _ := NewSubjects(SubjectsOptions{Now: clk.Now})
			c := Claims{RPS: 1, Connections: 1, ReadBps: 1000, WriteBps: 2000}
			g1, err := s.Admit(tc.first, c)
			if err != nil {
				t.Fatalf("first: %v", err)
			}
			defer g1.Release()
			g2, err := s.Admit(tc.second, c)
			if tc.shared {
				// rps is spent first; connections is held too.
				var ref *Refusal
				if !errors.As(err, &ref) || ref.Limit != "rps" {
					t.Fatalf("second on a shared budget: %v, want an rps refusal", err)
				}
				clk.Add(2 * time.Second) // a fresh rps budget; the connection is still held
				if _, err := s.Admit(tc.second, c); !errors.As(err, &ref) || ref.Limit != "connections" {
					t.Fatalf("second after the rps window: %v, want a connections refusal", err)
				}
				g3, err := s.Admit(tc.second, Claims{ReadBps: 1000, WriteBps: 2000})
				if err != nil {
					t.Fatal(err)
				}
				defer g3.Release()
				if g3.Read != g1.Read || g3.Write != g1.Write {
					t.Fatal("the same subject got a second byte-rate limiter")
				}
				if n := s.Len(); n != 1 {
					t.Fatalf("population %d, want 1", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("second spent the first's budget: %v", err)
			}
			defer g2.Release()
			if g1.Read == g2.Read || g1.Write == g2.Write {
				t.Fatal("the two share a byte-rate limiter")
			}
			if a, b := s.Active(tc.first), s.Active(tc.second); a != 1 || b != 1 {
				t.Fatalf("active %d and %d, want 1 each", a, b)
			}
			if n := s.Len(); n != 2 {
				t.Fatalf("population %d, want 2", n)
			}
		})
	}
}

// TestReaderNeverCuts checks a rate-limited reader delivers every byte.
func TestReaderNeverCuts(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 20_000) // 200 KB
	r := NewReader(context.Background(), io.NopCloser(bytes.NewReader(data)), NewRate(10<<20))
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v", len(got), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = NewReader(ctx, io.NopCloser(bytes.NewReader(data)), NewRate(1024))
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled read: %v", err)
	}
}
