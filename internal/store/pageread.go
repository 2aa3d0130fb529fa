package store

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// pageReaders bounds the leader reads one page has in flight. One after
// the other, a page's reads wait a round trip each: a page of 1000 on
// one loopback server took 115-130 ms so and 46-57 ms 32 at a time, with
// a third less CPU, the server's included (BenchmarkPageReads, 2 cores;
// 1.0-1.4x while other processes held both). The API runs at most four
// pages at once (internal/api's maxPageLists), so a gateway sends a
// stream leader at most 128 of them. A read's own timeout (leaderGets'
// when ctx has none) counts its wait behind the page's other reads.
const pageReaders = 32

// readInOrder calls read for indexes 0 to n-1, up to pageReaders at once,
// and hands each result to use in index order, as a loop over them one
// after the other would, until use returns 0. want, and then what use
// returns, is at most how many more results it can take: no more reads
// than that are in flight, so that a page reads no key past the ones it
// returns, but for those it skips. The reads run on a copy of ctx that is
// cancelled when readInOrder returns, and it returns only once every read
// has: a read's error reaches use in its turn, and use stops the rest by
// returning 0.
//
// A read that panics ends the page in its turn, as an error readInOrder
// returns (with the panic's value and stack, for the log): the reads run
// in goroutines of their own, which net/http's recovery of a handler's
// panic does not cover, so a panic there would end the process.
func readInOrder[R any](ctx context.Context, n, want int, read func(ctx context.Context, i int) R, use func(r R) (want int)) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type slot struct {
		r        R
		panicked error
		done     chan struct{}
	}
	ring := make([]slot, min(n, pageReaders))
	next := 0 // the first index not started
	for i := 0; i < n && want > 0; i++ {
		for next < n && next-i < min(want, len(ring)) {
			s, j, done := &ring[next%len(ring)], next, make(chan struct{})
			s.done = done
			wg.Go(func() {
				defer close(done)
				defer func() {
					if p := recover(); p != nil {
						s.panicked = fmt.Errorf("read %d of the page panicked: %v\n%s", j, p, debug.Stack())
					}
				}()
				s.r = read(ctx, j)
			})
			next++
		}
		s := &ring[i%len(ring)]
		<-s.done
		if s.panicked != nil {
			return s.panicked
		}
		want = use(s.r)
	}
	return nil
}
