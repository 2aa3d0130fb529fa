package edge

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// workers serves an accept loop's connections on goroutines that outlive
// one connection: a goroutine that finished one waits a while for the
// next. A fresh goroutine per connection starts with a small stack and
// grows it, copying every frame, through the ClientHello, the dial or
// handshake and the pipe, on every connection (measured: ~4.5 % of a
// passthrough connection's CPU in runtime.morestack); a reused one grew it
// once.
//
// At most maxIdle wait at once, each for idleFor, so a burst of
// connections (a client opening 10,000 at once) does not leave a
// goroutine and its grown stack behind per connection. The loop's owner
// stops them with stop; wg counts them.
type workers struct {
	serve   func(net.Conn)
	wg      *sync.WaitGroup
	maxIdle int32
	idleFor time.Duration

	conns chan net.Conn // unbuffered: a send succeeds only to a waiting worker
	done  chan struct{}
	idle  atomic.Int32 // workers waiting, or about to
	// started counts the goroutines hand started (tests read it).
	started atomic.Int64
}

// Why these: enough waiting workers for the connections a gateway sets
// up at once on a few cores, few enough that their stacks (8-32 KiB) stay
// under a MiB or two; idle long enough to bridge the gaps between
// connections under load, short enough not to linger after it.
const (
	maxIdleWorkers = 64
	workerIdleFor  = 10 * time.Second
)

func newWorkers(wg *sync.WaitGroup, serve func(net.Conn)) *workers {
	return &workers{serve: serve, wg: wg, maxIdle: maxIdleWorkers, idleFor: workerIdleFor,
		conns: make(chan net.Conn), done: make(chan struct{})}
}

// hand serves c on a waiting worker, or on a new one when none waits.
// Only the accept loop calls it, and never after stop.
func (w *workers) hand(c net.Conn) {
	select {
	case w.conns <- c:
		return
	default:
	}
	w.started.Add(1)
	w.wg.Add(1)
	go w.work(c)
}

// stop ends the waiting workers; busy ones end after their connection.
func (w *workers) stop() { close(w.done) }

func (w *workers) work(c net.Conn) {
	defer w.wg.Done()
	w.serve(c)
	t := time.NewTimer(w.idleFor)
	defer t.Stop()
	for {
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		t.Reset(w.idleFor)
		select {
		case c := <-w.conns:
			w.idle.Add(-1)
			w.serve(c)
		case <-t.C:
			w.idle.Add(-1)
			return
		case <-w.done:
			w.idle.Add(-1)
			return
		}
	}
}
