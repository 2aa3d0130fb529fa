package deadline

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func TestClockNowIsBetweenTimeNows(t *testing.T) {
	c := NewClock()
	for range 100 {
		before := time.Now()
		now := c.Now()
		after := time.Now()
		if now.Before(before) || now.After(after) {
			t.Fatalf("Clock.Now %v not within [%v, %v]", now, before, after)
		}
	}
	if s := c.Now().String(); !strings.Contains(s, " m=+") {
		t.Fatalf("Clock.Now carries no monotonic reading: %s", s)
	}
}

// A deadline from a Clock bounds a real socket read as one from time.Now
// does: neither at once nor never.
func TestClockDeadlineOnSocket(t *testing.T) {
	c, _ := testutil.TCPPair(t)
	clock := NewClock()
	const d = 80 * time.Millisecond
	tests := []struct {
		name string
		at   func() time.Time
	}{
		{"Now+d", func() time.Time { return clock.Now().Add(d) }},
		{"At(Elapsed+d)", func() time.Time { return clock.At(clock.Elapsed() + d) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			if err := c.SetReadDeadline(tt.at()); err != nil {
				t.Fatal(err)
			}
			_, err := c.Read(make([]byte, 1))
			took := time.Since(start)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read: %v, want a deadline error", err)
			}
			if took < d/2 || took > 5*time.Second {
				t.Fatalf("deadline %v ahead ran out after %v", d, took)
			}
		})
	}
}
