package edge

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/workers"
)

// offload runs each HTTP/2 request's handler on a reused goroutine
// (package workers) while net/http's goroutine for the stream waits for
// it. net/http starts a goroutine per stream, which grew its stack through
// the whole chain on every request (runtime.morestack ~5 % of gatehouse's
// CPU per HTTP/2 request); a hand-over costs less (five alternating
// harness pairs: 2.71/2.89/2.74/2.90/2.49x nginx's CPU per HTTP/2 request
// without, 2.82/2.64/2.63/2.67/2.27x with). HTTP/1.1 requests that reach
// net/http run where they are.
//
// A panic in the handler is carried back and raised again on net/http's
// goroutine, which recovers it as before: http.ErrAbortHandler as it is
// (the stream is reset quietly), anything else with the handler's stack
// in its text, since the stack net/http logs is the waiting goroutine's.
//
// The HTTP/2 branch is also where a stream's stalled writes are bounded
// (streamStall): it is the one place every HTTP/2 request passes and no
// HTTP/1 request pays for.
type offload struct {
	next  http.Handler
	stall time.Duration // streamStall's bound
	pool  *workers.Pool[*offloadTask]
	tasks sync.Pool // *offloadTask
}

type offloadTask struct {
	w    http.ResponseWriter
	r    *http.Request
	done chan any // the handler's panic, or nil; buffered
	// sw bounds the stream's writes; kept with the task, so that bounding
	// a request allocates nothing.
	sw streamStall
}

// offloadedPanic is a handler's panic raised again on another goroutine.
type offloadedPanic struct {
	value any
	stack []byte
}

func (p offloadedPanic) String() string {
	return fmt.Sprintf("%v\n\nhandler goroutine (offloaded):\n%s", p.value, p.stack)
}

func newOffload(wg *sync.WaitGroup, next http.Handler, stall time.Duration) *offload {
	o := &offload{next: next, stall: stall}
	o.pool = workers.New(wg, workers.DefaultMaxIdle, workers.DefaultIdleFor, o.run)
	return o
}

// run serves one task on a pool goroutine.
func (o *offload) run(t *offloadTask) {
	var p any
	defer func() { t.done <- p }()
	defer func() {
		if p = recover(); p != nil && p != http.ErrAbortHandler {
			p = offloadedPanic{value: p, stack: debug.Stack()}
		}
	}()
	o.next.ServeHTTP(t.w, t.r)
}

func (o *offload) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 {
		o.next.ServeHTTP(w, r)
		return
	}
	t, _ := o.tasks.Get().(*offloadTask)
	if t == nil {
		t = &offloadTask{done: make(chan any, 1)}
	}
	t.w, t.r = t.sw.start(w, o.stall), r
	o.pool.Go(t)
	p := <-t.done
	t.sw.stop()
	t.w, t.r = nil, nil
	o.tasks.Put(t)
	if p != nil {
		panic(p)
	}
}
