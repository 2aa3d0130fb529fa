package edge

import (
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
type streamStall struct {
	http.ResponseWriter
	stall time.Duration

	// writes is incremented when a Write or Flush begins and when it
	// ends: odd while one is waiting. The only cost on each write.
	writes atomic.Uint64

	mu    sync.Mutex // serializes check with start and stop
	timer *time.Timer
	live  bool   // the handler runs: ResponseWriter may be used
	seen  uint64 // writes at the last check
	same  int    // checks in a row that saw the same write waiting
}

// start arms s for a request whose handler writes to w.
func (s *streamStall) start(w http.ResponseWriter, stall time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ResponseWriter, s.stall, s.live, s.seen, s.same = w, stall, true, 0, 0
	s.writes.Store(0)
	if s.timer == nil {
		s.timer = time.AfterFunc(stall/2, s.check)
	} else {
		s.timer.Reset(stall / 2)
	}
}

// stop disarms s once the handler has returned: from then on net/http
// owns the ResponseWriter again, and a check that runs late (its timer
// fired before stop) finds s not live and leaves it alone.
func (s *streamStall) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = false
	s.ResponseWriter = nil
	s.timer.Stop()
}

// check runs on the timer's goroutine. Setting a past write deadline from
// there is what net/http's own stream deadline does when it fires: the
// HTTP/2 server queues the stream's reset to its connection goroutine.
func (s *streamStall) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live {
		return
	}
	if n := s.writes.Load(); n&1 == 1 && n == s.seen {
		s.same++
	} else {
		s.seen, s.same = n, 0
	}
	if s.same >= 2 {
		_ = http.NewResponseController(s.ResponseWriter).SetWriteDeadline(time.Unix(1, 0))
		return // the stream is reset: no more checks
	}
	s.timer.Reset(s.stall / 2)
}

func (s *streamStall) Write(p []byte) (int, error) {
	s.writes.Add(1)
	defer s.writes.Add(1)
	return s.ResponseWriter.Write(p)
}

// FlushError is counted like Write: a flush waits on the window too.
func (s *streamStall) FlushError() error {
	s.writes.Add(1)
	defer s.writes.Add(1)
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *streamStall) Flush() { _ = s.FlushError() }

// Unwrap keeps the rest of http.ResponseController (deadlines, full
// duplex) reaching the stream.
func (s *streamStall) Unwrap() http.ResponseWriter { return s.ResponseWriter }
