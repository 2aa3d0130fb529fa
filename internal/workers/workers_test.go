package workers

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestPool: tasks one after another are served by one goroutine;
// a burst gets a goroutine each, and afterwards no more than maxIdle of
// them wait; an idle worker ends after idleFor; stop ends the waiting
// ones; every connection is served exactly once.
func TestPool(t *testing.T) {
	newPool := func(t *testing.T, maxIdle int, idleFor time.Duration, serve func(net.Conn)) (*Pool[net.Conn], *sync.WaitGroup) {
		var wg sync.WaitGroup
		return New(&wg, maxIdle, idleFor, serve), &wg
	}
	// waitIdle waits until n workers wait (or fails).
	waitIdle := func(t *testing.T, w *Pool[net.Conn], n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for w.Idle() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines wait, want %d", w.Idle(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	conns := func(n int) []net.Conn {
		out := make([]net.Conn, n)
		for i := range out {
			a, b := net.Pipe()
			b.Close()
			out[i] = a
		}
		return out
	}

	t.Run("sequential connections reuse one goroutine", func(t *testing.T) {
		got := make(chan net.Conn, 10)
		w, wg := newPool(t, 4, time.Minute, func(c net.Conn) { got <- c })
		for i, c := range conns(10) {
			w.Go(c)
			if s := <-got; s != c {
				t.Fatalf("connection %d: served %v", i, s)
			}
			waitIdle(t, w, 1) // served, back waiting
		}
		if n := w.Started(); n != 1 {
			t.Fatalf("%d goroutines started for 10 sequential connections, want 1", n)
		}
		w.Stop()
		w.Stop() // twice is harmless
		wg.Wait()
		if n := w.Idle(); n != 0 {
			t.Fatalf("%d still counted idle after stop", n)
		}
	})

	t.Run("a task the moment one waits goes to it", func(t *testing.T) {
		// The instant Idle counts a goroutine, Go must find it: no new
		// goroutine for a task that comes right after the last ended.
		got := make(chan net.Conn, 1)
		w, wg := newPool(t, 4, time.Minute, func(c net.Conn) { got <- c })
		c := conns(1)[0]
		for i := range 2000 {
			w.Go(c)
			<-got
			for start := time.Now(); w.Idle() != 1; runtime.Gosched() {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("task %d: %d goroutines wait, want 1", i, w.Idle())
				}
			}
			if n := w.Started(); n != 1 {
				t.Fatalf("task %d: %d goroutines started, want 1", i, n)
			}
		}
		w.Stop()
		wg.Wait()
	})

	t.Run("the most recently idle goroutine takes the next task", func(t *testing.T) {
		// Two goroutines wait after a burst of two; tasks one at a time
		// then all go to the one on top, so the other reaches its idle
		// time and ends (taken in turns, both would stay).
		const idleFor = 400 * time.Millisecond
		release := make(chan struct{})
		done := make(chan struct{}, 1)
		var busy sync.WaitGroup
		busy.Add(2)
		w, wg := newPool(t, 4, idleFor, func(c net.Conn) {
			if c == nil {
				busy.Done()
				<-release
				return
			}
			done <- struct{}{}
		})
		w.Go(nil)
		w.Go(nil)
		busy.Wait()
		close(release)
		waitIdle(t, w, 2)
		c := conns(1)[0]
		for end := time.Now().Add(5 * idleFor); time.Now().Before(end); time.Sleep(idleFor / 10) {
			w.Go(c)
			<-done
		}
		// The last task's goroutine goes back to waiting after its task
		// said done; give it up to half an idle timeout, well before
		// any waiting goroutine could end.
		for back := time.Now().Add(idleFor / 2); w.Idle() == 0 && time.Now().Before(back); {
			time.Sleep(time.Millisecond)
		}
		if n := w.Idle(); n != 1 {
			t.Fatalf("%d goroutines wait after tasks one at a time, want 1: the other should have ended", n)
		}
		// 2, the burst's; 3 only if this goroutine stalled past idleFor
		// between two tasks, so that the top one ended too and a third
		// took over. Either way one waits, where taking turns keeps two.
		if n := w.Started(); n > 3 {
			t.Fatalf("%d goroutines started, want the burst's 2", n)
		}
		w.Stop()
		wg.Wait()
	})

	t.Run("a burst leaves at most maxIdle waiting", func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		seen := map[net.Conn]int{}
		var busy sync.WaitGroup
		busy.Add(20)
		w, wg := newPool(t, 3, time.Minute, func(c net.Conn) {
			mu.Lock()
			seen[c]++
			mu.Unlock()
			busy.Done()
			<-release
		})
		cs := conns(20)
		for _, c := range cs {
			w.Go(c)
		}
		busy.Wait() // all 20 are being served at once
		if n := w.Started(); n != 20 {
			t.Fatalf("%d goroutines for 20 concurrent connections, want 20", n)
		}
		close(release)
		waitIdle(t, w, 3)
		time.Sleep(20 * time.Millisecond) // no more join them
		if n := w.Idle(); n != 3 {
			t.Fatalf("%d waiting after the burst, want maxIdle 3", n)
		}
		w.Stop()
		wg.Wait()
		for _, c := range cs {
			if seen[c] != 1 {
				t.Fatalf("a connection served %d times", seen[c])
			}
		}
	})

	t.Run("an idle worker ends after idleFor", func(t *testing.T) {
		w, wg := newPool(t, 4, 20*time.Millisecond, func(net.Conn) {})
		w.Go(conns(1)[0])
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("idle worker still running 5 s after its 20 ms idle time")
		}
		if n := w.Idle(); n != 0 {
			t.Fatalf("%d counted idle after it ended", n)
		}
		w.Stop()
	})
}
