package workers

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs tasks of type T on goroutines that wait for the next task
// after one ends. Go and Stop are safe for concurrent use.
type Pool[T any] struct {
	run     func(T)
	wg      *sync.WaitGroup
	maxIdle int32
	idleFor time.Duration

	tasks    chan T // unbuffered: a send succeeds only to a waiting goroutine
	done     chan struct{}
	stopOnce sync.Once
	idle     atomic.Int32 // goroutines waiting, or about to
	started  atomic.Int64
}

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
	return &Pool[T]{run: run, wg: wg, maxIdle: int32(maxIdle), idleFor: idleFor,
		tasks: make(chan T), done: make(chan struct{})}
}

// Go runs task on a waiting goroutine, or on a new one when none waits.
// It never blocks. After Stop it must not be called: the owner orders the
// two (an accept loop that has ended, a server that is closed).
func (p *Pool[T]) Go(task T) {
	select {
	case p.tasks <- task:
		return
	default:
	}
	p.started.Add(1)
	p.wg.Add(1)
	go p.work(task)
}

// Stop ends the waiting goroutines; busy ones end after their task.
func (p *Pool[T]) Stop() { p.stopOnce.Do(func() { close(p.done) }) }

// Started is how many goroutines Go has started.
func (p *Pool[T]) Started() int64 { return p.started.Load() }

// Idle is how many goroutines wait for a task.
func (p *Pool[T]) Idle() int { return int(p.idle.Load()) }

func (p *Pool[T]) work(task T) {
	defer p.wg.Done()
	p.run(task)
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for {
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		t.Reset(p.idleFor)
		select {
		case task := <-p.tasks:
			p.idle.Add(-1)
			p.run(task)
		case <-t.C:
			p.idle.Add(-1)
			return
		case <-p.done:
			p.idle.Add(-1)
			return
		}
	}
}
