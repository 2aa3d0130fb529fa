package workers

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs tasks of type T on goroutines that wait for the next task
// after one ends. Go and Stop are safe for concurrent use.
//
// The waiting goroutines are a stack, the most recently idle on top: Go
// takes the top one (its stack and caches the warmest) and hands it the
// task on the goroutine's own buffered channel. A goroutine is on the
// stack from the moment it may be given a task, so a task that comes
// after one ended always finds it: with a shared unbuffered channel, a
// goroutine between "about to wait" and its receive was missed and a new
// one started beside it.
type Pool[T any] struct {
	run     func(T)
	wg      *sync.WaitGroup
	maxIdle int
	idleFor time.Duration

	mu      sync.Mutex
	waiting []*waiter[T] // most recently idle last
	stopped bool
	started atomic.Int64
}

// waiter is one waiting goroutine's hand-over: Go sends it one task, Stop
// closes it.
type waiter[T any] struct{ tasks chan T }

// Defaults for New's bounds: enough waiting goroutines for the tasks a
// gateway starts at once on a few cores, few enough that their stacks
// (8-32 KiB) stay under a MiB or two; idle long enough to bridge the gaps
// between tasks under load, short enough not to linger after it.
const (
	DefaultMaxIdle = 64
	DefaultIdleFor = 10 * time.Second
)

// New returns a pool that runs run; wg counts its goroutines. At most
// maxIdle wait at once, each for idleFor.
func New[T any](wg *sync.WaitGroup, maxIdle int, idleFor time.Duration, run func(T)) *Pool[T] {
	return &Pool[T]{run: run, wg: wg, maxIdle: maxIdle, idleFor: idleFor}
}

// Go runs task on the most recently idle goroutine, or on a new one when
// none waits. It never blocks. After Stop it must not be called: the owner
// orders the two (an accept loop that has ended, a server that is closed).
func (p *Pool[T]) Go(task T) {
	p.mu.Lock()
	if n := len(p.waiting); n > 0 {
		w := p.waiting[n-1]
		p.waiting[n-1] = nil
		p.waiting = p.waiting[:n-1]
		p.mu.Unlock()
		w.tasks <- task // buffered, and only Go sends: never blocks
		return
	}
	p.mu.Unlock()
	p.started.Add(1)
	p.wg.Add(1)
	go p.work(task)
}

// Stop ends the waiting goroutines; busy ones end after their task.
func (p *Pool[T]) Stop() {
	p.mu.Lock()
	ws := p.waiting
	p.waiting, p.stopped = nil, true
	p.mu.Unlock()
	for _, w := range ws {
		close(w.tasks)
	}
}

// Started is how many goroutines Go has started.
func (p *Pool[T]) Started() int64 { return p.started.Load() }

// Idle is how many goroutines wait for a task.
func (p *Pool[T]) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting)
}

func (p *Pool[T]) work(task T) {
	defer p.wg.Done()
	p.run(task)
	w := &waiter[T]{tasks: make(chan T, 1)}
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for {
		p.mu.Lock()
		if p.stopped || len(p.waiting) >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.waiting = append(p.waiting, w)
		p.mu.Unlock()
		t.Reset(p.idleFor)
		var ok bool
		select {
		case task, ok = <-w.tasks:
		case <-t.C:
			p.mu.Lock()
			i := slices.Index(p.waiting, w)
			if i >= 0 {
				p.waiting = slices.Delete(p.waiting, i, i+1)
			}
			p.mu.Unlock()
			if i >= 0 {
				return
			}
			// Go took w off the stack as the time ran out: its task is
			// on the way (or Stop closed w).
			task, ok = <-w.tasks
		}
		if !ok {
			return // stopped
		}
		p.run(task)
	}
}
