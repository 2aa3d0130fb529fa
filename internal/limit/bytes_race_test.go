package limit

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestBurstLoweredMidWait: subjects share one byte-rate limiter across
// their requests, and a request whose claim changed the rate lowers its
// burst while another is between reading the burst and waiting for it. The
// waiter must take the new burst, not fail its read or write (rate's
// "exceeds limiter's burst").
func TestBurstLoweredMidWait(t *testing.T) {
	l := rate.NewLimiter(rate.Limit(1<<40), 64<<10) // fast: the waits are the race, not the rate
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				l.SetBurst(1 << 10)
			} else {
				l.SetBurst(64 << 10)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	buf := make([]byte, 64<<10)
	for i := range 20000 {
		if err := wait(ctx, l, 64<<10); err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
		if _, err := paced(ctx, l, buf, func(p []byte) (int, error) { return len(p), nil }, nil); err != nil {
			t.Fatalf("paced %d: %v", i, err)
		}
	}
}
