package limit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

func TestSubjectsRPS(t *testing.T) {
	clk := newClock()
	s, _ := NewSubjects(SubjectsOptions{Now: clk.Now})
	c := Claims{RPS: 3}
	for i := range 3 {
		g, err := s.Admit("alice", c)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		g.Release()
	}
	_, err := s.Admit("alice", c)
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Limit != "rps" || ref.RetryAfter <= 0 {
		t.Fatalf("fourth request: %v", err)
	}
	if _, err := s.Admit("bob", c); err != nil {
		t.Fatalf("another subject shares alice's budget: %v", err)
	}
	clk.Add(2 * time.Second)
	if _, err := s.Admit("alice", c); err != nil {
		t.Fatalf("after 2s: %v", err)
	}
}

func TestSubjectsConnections(t *testing.T) {
	s, _ := NewSubjects(SubjectsOptions{})
	c := Claims{Connections: 2}
	g1, err1 := s.Admit("alice", c)
	g2, err2 := s.Admit("alice", c)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	_, err := s.Admit("alice", c)
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Limit != "connections" {
		t.Fatalf("third connection: %v", err)
	}
	g1.Release()
	g1.Release() // idempotent
	if n := s.Active("alice"); n != 1 {
		t.Fatalf("active %d after one release, want 1", n)
	}
	g3, err := s.Admit("alice", c)
	if err != nil {
		t.Fatal(err)
	}
	g2.Release()
	g3.Release()
	if n := s.Active("alice"); n != 0 {
		t.Fatalf("active %d, want 0", n)
	}
}

func TestSubjectsBoundedAndPinned(t *testing.T) {
	s, _ := NewSubjects(SubjectsOptions{MaxSubjects: nshards}) // one per shard
	g, err := s.Admit("holder", Claims{Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if g, err := s.Admit(string(rune('a'+i%26))+string(rune(i)), Claims{}); err == nil {
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
	g, _ := s.Admit("alice", Claims{ReadBps: 1000, WriteBps: 5000})
	if g.Read == nil || g.Write == nil || g.Read.Limit() != 1000 || g.Write.Limit() != 5000 {
		t.Fatalf("grant %+v", g)
	}
	g.Release()
	g, _ = s.Admit("alice", Claims{WriteBps: 8000})
	if g.Read != nil || g.Write.Limit() != 8000 {
		t.Fatalf("second grant %+v", g)
	}
	g.Release()
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
