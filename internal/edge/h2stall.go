package edge

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// streamStall bounds an HTTP/2 response write that waits on the client's
// flow-control window. The connection's write bound (trackedConn) never
// sees such a stream: the connection keeps moving (PINGs, other streams)
// while the one stream whose window the client keeps shut blocks its
// handler's Write, and with it the handler's goroutine and its upstream
// connection, for as long as the client likes.
//
// A stream write deadline (http.ResponseController.SetWriteDeadline) is
// what resets the stream and fails the write, but net/http's HTTP/2
// server resets a stream when its deadline passes whether or not a write
// is waiting, so re-arming one before writes, as trackedConn does, would
// also cut a healthy stream that is merely quiet for longer than the
// bound (an event stream, a long poll), and clearing it after each write
// would cost two messages to the connection's goroutine per write. So a
// timer per stream looks every half stall at a count of the writes begun
// and ended, and sets a deadline in the past, which resets the stream at
// once, only when it has seen the same write waiting three times: for at
// least a stall, at most a stall and a half, as on a connection.
//
// The zero value is unused; offload arms one per HTTP/2 request (start)
// and disarms it once the handler has returned (stop), keeping it with
// its task for the next request.
//
// What the handler writes to is not the streamStall but a stallWriter
// handed out for that request alone and never again: a write after the
// handler returned (from a goroutine it left behind) reaches a writer
// marked done and fails, instead of the next request's stream, which a
// pooled wrapper reused as it is would give it. Writers come in blocks of
// stallWriters, so that this costs no allocation per request: a block per
// stallWriters requests of the task.
type streamStall struct {
	mu    sync.Mutex // serializes check with start and stop
	stall time.Duration
	timer *time.Timer
	cur   *stallWriter // the running handler's; nil between requests
	seen  uint64       // cur's writes at the last check
	same  int          // checks in a row that saw the same write waiting
	spare []stallWriter
}

// stallWriters is how many writers a block holds.
const stallWriters = 64

// stallWriter is the ResponseWriter of one HTTP/2 request's handler.
type stallWriter struct {
	w http.ResponseWriter

	// writes is incremented when a Write or Flush begins and when it
	// ends: odd while one is waiting. The only cost on each write.
	writes atomic.Uint64
	// done is set once the handler has returned: from then on net/http
	// owns w again, and the writer refuses to touch it. (A write racing
	// the handler's return is the handler's race, as with net/http's own
	// writer; it can reach no stream but its own.)
	done atomic.Bool
}

// errWriteAfterReturn is what a write to a response gets once its
// handler has returned.
var errWriteAfterReturn = errors.New("edge: write to an HTTP/2 response after its handler returned")

// start arms s for a request whose handler writes to w, and returns the
// writer the handler gets.
func (s *streamStall) start(w http.ResponseWriter, stall time.Duration) *stallWriter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.spare) == 0 {
		s.spare = make([]stallWriter, stallWriters)
	}
	sw := &s.spare[0]
	s.spare = s.spare[1:]
	sw.w = w
	s.cur, s.stall, s.seen, s.same = sw, stall, 0, 0
	if s.timer == nil {
		s.timer = time.AfterFunc(stall/2, s.check)
	} else {
		s.timer.Reset(stall / 2)
	}
	return sw
}

// stop disarms s once the handler has returned, and retires its writer;
// a check that runs late (its timer fired before stop) finds no writer
// and leaves the stream alone.
func (s *streamStall) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur.done.Store(true)
	s.cur = nil
	s.timer.Stop()
}

// check runs on the timer's goroutine. Setting a past write deadline from
// there is what net/http's own stream deadline does when it fires: the
// HTTP/2 server queues the stream's reset to its connection goroutine.
func (s *streamStall) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := s.cur
	if sw == nil {
		return
	}
	if n := sw.writes.Load(); n&1 == 1 && n == s.seen {
		s.same++
	} else {
		s.seen, s.same = n, 0
	}
	if s.same >= 2 {
		_ = http.NewResponseController(sw.w).SetWriteDeadline(time.Unix(1, 0))
		return // the stream is reset: no more checks
	}
	s.timer.Reset(s.stall / 2)
}

// Header returns the response's header, or after the handler returned a
// header of nobody's (net/http's own writer would panic).
func (w *stallWriter) Header() http.Header {
	if w.done.Load() {
		return http.Header{}
	}
	return w.w.Header()
}

func (w *stallWriter) WriteHeader(code int) {
	if !w.done.Load() {
		w.w.WriteHeader(code)
	}
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if w.done.Load() {
		return 0, errWriteAfterReturn
	}
	w.writes.Add(1)
	defer w.writes.Add(1)
	return w.w.Write(p)
}

// FlushError is counted like Write: a flush waits on the window too.
func (w *stallWriter) FlushError() error {
	if w.done.Load() {
		return errWriteAfterReturn
	}
	w.writes.Add(1)
	defer w.writes.Add(1)
	return http.NewResponseController(w.w).Flush()
}

func (w *stallWriter) Flush() { _ = w.FlushError() }

// Unwrap keeps the rest of http.ResponseController (deadlines, full
// duplex) reaching the stream while the handler runs; after, nothing, and
// the controller's methods fail with an error.
func (w *stallWriter) Unwrap() http.ResponseWriter {
	if w.done.Load() {
		return nil
	}
	return w.w
}
