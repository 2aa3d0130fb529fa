package h2

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// onReader reports whether the calling handler runs inline, on its
// connection's reading goroutine.
func onReader() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), ".serveInline(")
}

// where answers "inline" or "pooled": where its handler ran.
func where(w http.ResponseWriter) {
	if onReader() {
		_, _ = io.WriteString(w, "inline")
		return
	}
	_, _ = io.WriteString(w, "pooled")
}

// warm sends loneFirst requests one at a time on rc (streams 1, 3, ...),
// after which the connection's lone requests run inline, and returns the
// next stream id.
func warm(t *testing.T, rc *rawClient) uint32 {
	t.Helper()
	id := uint32(1)
	for range loneFirst {
		rc.headers(id, true, reqFields("GET", "/warm")...)
		rc.response(id)
		id += 2
	}
	return id
}

// inlineEnded waits until no connection of s runs a handler inline, nor
// has one still finishing on a goroutine whose reading moved on (moved):
// only then may its next lone request run inline.
func inlineEnded(t *testing.T, s *Server) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		s.imu.Lock() // before cn.mu, as the watcher takes them
		defer s.imu.Unlock()
		for _, cn := range s.inl {
			cn.mu.Lock()
			busy := cn.inline != nil || cn.moved
			cn.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	}, "an inline handler never returned")
}

// TestInlineOnlyAfterLoneRequests: a connection's bodiless requests run on
// its reading goroutine once loneFirst of them came one at a time, and
// not again until loneFirst more have after streams opened side by side.
func TestInlineOnlyAfterLoneRequests(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/first":
			<-second // open until the stream beside it is
		case "/second":
			close(second)
		}
		where(w)
	})
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	// An answer reaches the client before the goroutine that ran its
	// handler inline leaves serveInline, and one that ran past inlineMax
	// (a loaded machine) had the reading moved on: until that goroutine
	// has returned, no request runs inline, whatever the count. Each
	// request waits for it, as a client's next one would come a moment
	// later.
	want := func(id uint32, path, at string) {
		t.Helper()
		inlineEnded(t, s)
		rc.headers(id, true, reqFields("GET", path)...)
		if _, body := rc.response(id); body != at {
			t.Fatalf("stream %d (%s) ran %s, want %s", id, path, body, at)
		}
	}
	want(1, "/", "pooled")
	want(3, "/", "pooled")
	want(5, "/", "inline")
	want(7, "/", "inline")

	// Two streams side by side: the first starts inline (the connection
	// has come one at a time so far); the second is read once the client
	// is seen to have sent it, and makes the connection wait again.
	inlineEnded(t, s)
	rc.headers(9, true, reqFields("GET", "/first")...)
	rc.headers(11, true, reqFields("GET", "/second")...)
	got := map[uint32]string{}
	var body [2]strings.Builder
	rc.until("both answers", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			body[(d.StreamID-9)/2].Write(d.Data())
			if d.StreamEnded() {
				got[d.StreamID] = body[(d.StreamID-9)/2].String()
			}
		}
		return len(got) == 2
	})
	if got[9] != "inline" || got[11] != "pooled" {
		t.Fatalf("side by side: stream 9 ran %s, 11 %s; want inline, pooled", got[9], got[11])
	}
	want(13, "/", "pooled")
	want(15, "/", "pooled")
	want(17, "/", "inline")
}

// TestInlineHandlerHoldsNothingUp: while a handler running on the reading
// goroutine waits (a slow host), whatever the client sends is read at the
// timer's next look at the socket, not when the handler returns: a second
// stream is answered, a PING acknowledged, a RST_STREAM cancels the slow
// handler. The bound is set to a minute, so only the look can move the
// reading on.
func TestInlineHandlerHoldsNothingUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		send func(rc *rawClient)
		seen func(rc *rawClient, ended <-chan error)
	}{
		{"a second stream", func(rc *rawClient) {
			rc.headers(101, true, reqFields("GET", "/fast")...)
		}, func(rc *rawClient, _ <-chan error) {
			if _, body := rc.response(101); body != "pooled" {
				t.Fatalf("second stream: %q", body)
			}
		}},
		{"a PING", func(rc *rawClient) {
			if err := rc.fr.WritePing(false, [8]byte{'p', 'i', 'n', 'g'}); err != nil {
				t.Fatal(err)
			}
		}, func(rc *rawClient, _ <-chan error) {
			rc.until("the PING's ACK", func(f http2.Frame) bool {
				p, ok := f.(*http2.PingFrame)
				return ok && p.IsAck() && p.Data == [8]byte{'p', 'i', 'n', 'g'}
			})
		}},
		{"a RST_STREAM", func(rc *rawClient) {
			if err := rc.fr.WriteRSTStream(99, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		}, func(_ *rawClient, ended <-chan error) {
			select {
			case err := <-ended:
				if err == nil {
					t.Fatal("the slow handler ended uncancelled")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the client's RST_STREAM did not cancel the slow inline handler")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entered, ended := make(chan bool, 1), make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/slow" {
					where(w)
					return
				}
				entered <- onReader()
				select {
				case <-r.Context().Done():
					ended <- r.Context().Err()
				case <-time.After(10 * time.Second):
					ended <- nil
				}
			})
			s, addr := serve(t, Options{Handler: h, inlineMax: time.Minute})
			rc := dialRaw(t, addr)
			warm(t, rc)
			rc.headers(99, true, reqFields("GET", "/slow")...)
			if !<-entered {
				t.Fatal("the slow request did not run inline")
			}
			tt.send(rc)
			tt.seen(rc, ended)
			if n := s.readers.Started(); n != 1 {
				t.Fatalf("the reading moved %d times, want once", n)
			}
		})
	}
}

// blindConn is a connection that cannot see what the client sent: as
// one whose bytes sit in crypto/tls's buffer.
type blindConn struct{ net.Conn }

func (blindConn) Pending() bool { return false }

// TestInlineHandlerLooks: a slow inline handler on a quiet connection
// keeps the reading (the timer looked and found nothing); where the look
// cannot see what came, the reading moves on at the bound, and not
// before.
func TestInlineHandlerLooks(t *testing.T) {
	t.Parallel()
	t.Run("quiet client", func(t *testing.T) {
		const slow = 60 * time.Millisecond
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(slow)
			}
			where(w)
		})
		s, addr := serve(t, Options{Handler: h, inlineMax: time.Minute})
		rc := dialRaw(t, addr)
		id := warm(t, rc)
		rc.headers(id, true, reqFields("GET", "/slow")...)
		if _, body := rc.response(id); body != "inline" {
			t.Fatalf("slow request ran %s", body)
		}
		if n := s.readers.Started(); n != 0 {
			t.Fatalf("the reading moved %d times on a quiet connection (looks every %v for %v)", n, s.opts.peekEvery, slow)
		}
	})
	t.Run("blind look", func(t *testing.T) {
		const bound = 60 * time.Millisecond
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
			}
			where(w)
		})
		s, addr := serveWrapped(t, Options{Handler: h, inlineMax: bound}, func(c net.Conn) net.Conn { return blindConn{c} })
		rc := dialRaw(t, addr)
		id := warm(t, rc)
		sent := time.Now() // the handler starts after this
		rc.headers(id, true, reqFields("GET", "/slow")...)
		if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
			t.Fatal(err)
		}
		rc.until("the PING's ACK", func(f http2.Frame) bool {
			p, ok := f.(*http2.PingFrame)
			return ok && p.IsAck()
		})
		if d := time.Since(sent); d < bound/2 {
			t.Fatalf("PING acknowledged after %v: the reading moved before the %v bound", d, bound)
		}
		close(release)
		if _, body := rc.response(id); body != "inline" {
			t.Fatalf("slow request ran %s", body)
		}
		if n := s.readers.Started(); n != 1 {
			t.Fatalf("the reading moved %d times, want once", n)
		}
	})
}

// TestInlineResponseOverTheWindow: an inline handler whose answer is
// bigger than the client's window moves the reading on as soon as it
// must wait, so the client's WINDOW_UPDATEs are read; it does not wait
// for the timer (set to a minute here).
func TestInlineResponseOverTheWindow(t *testing.T) {
	t.Parallel()
	want := strings.Repeat("0123456789abcdef", 1024) // 16 KiB
	s, addr := serve(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			return
		}
		if !onReader() {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		_, _ = io.WriteString(w, want)
	}), peekEvery: time.Minute, inlineMax: time.Minute})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	id := warm(t, rc)
	start := time.Now()
	rc.headers(id, true, reqFields("GET", "/")...)
	var body bytes.Buffer
	rc.until("the whole answer", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == id {
			body.Write(d.Data())
			if n := uint32(len(d.Data())); n > 0 {
				_ = rc.fr.WriteWindowUpdate(id, n)
				_ = rc.fr.WriteWindowUpdate(0, n)
			}
		}
		return endOf(id)(f)
	})
	if body.String() != want {
		t.Fatalf("got %d bytes (%.40q), want %d, inline", body.Len(), body.String(), len(want))
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the answer took %v: the window's updates waited for the timer", d)
	}
	if n := s.readers.Started(); n != 1 {
		t.Fatalf("the reading moved %d times, want once", n)
	}
}

// TestInlineMovesOverAndOver: requests one at a time, each followed at
// once by a PING, so the reading moves on during nearly every inline
// handler and the next request starts inline on the goroutine that took
// over, often before the last handler's goroutine is through. Every
// answer and ACK comes, the connection is in the watcher's list once,
// and out of it once it has ended.
func TestInlineMovesOverAndOver(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	})
	s, addr := serve(t, Options{Handler: h, peekEvery: 200 * time.Microsecond})
	rc := dialRaw(t, addr)
	id := warm(t, rc)
	for i := range 200 {
		rc.headers(id, true, reqFields("GET", "/")...)
		if err := rc.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		acked, ended := false, false
		rc.until(fmt.Sprint("request ", i, " and its PING"), func(f http2.Frame) bool {
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data[0] == byte(i) {
				acked = true
			}
			ended = ended || endOf(id)(f)
			return acked && ended
		})
		id += 2
	}
	if s.readers.Started() == 0 {
		t.Fatal("the reading never moved: the test tested nothing")
	}
	listed := func() int {
		s.imu.Lock()
		defer s.imu.Unlock()
		return len(s.inl)
	}
	if n := listed(); n != 1 {
		t.Fatalf("the watcher's list holds %d entries for one connection", n)
	}
	rc.c.Close()
	testutil.WaitFor(t, 5*time.Second, func() bool { return listed() == 0 }, "an ended connection left in the watcher's list")
}
