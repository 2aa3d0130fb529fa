package h2

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A stream's header maps must never reach another stream: not what an
// earlier stream on the connection received, set or left behind, and not
// while a handler still runs and holds them. These tests hold the server
// to that, should it reuse per-stream state.

// response reads frames until stream id's response ends and returns the
// names and values of its header fields, trailers included, in order,
// and its body.
func (rc *rawClient) response(id uint32) (fields []string, body string) {
	rc.t.Helper()
	rc.until(fmt.Sprint("the end of stream ", id), func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				for _, p := range f.Fields {
					fields = append(fields, p.Name, p.Value)
				}
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				body += string(f.Data())
			}
		}
		return endOf(id)(f)
	})
	return fields, body
}

func fieldMap(fields []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fields[i]] = fields[i+1]
	}
	return m
}

// keys is h's keys, sorted and joined: what a handler saw.
func keys(h http.Header) string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

// waitHandlers waits until no handler of s runs.
func waitHandlers(t *testing.T, s *Server) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); handlersRunning(s) > 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a handler did not return")
		}
	}
}

// TestNoHeadersFromAnEarlierStream: a stream's request and response
// header maps start empty of everything an earlier stream on the same
// connection put in them, however that stream ended: a reused map not
// cleared, or one a goroutine left behind still reaches, would carry a
// field (a cookie, a session) from one client's request or response into
// another's. Each case runs twice: streams new per request, and streams
// reused as behind the gateway (whose RequestDone says when nothing holds
// a request).
func TestNoHeadersFromAnEarlierStream(t *testing.T) {
	oneP(t)
	for _, tc := range []struct {
		name  string
		first func(w http.ResponseWriter, r *http.Request, rd *round)
		reset bool // the client resets stream 1 while its handler runs
	}{
		{"fields", func(w http.ResponseWriter, r *http.Request, _ *round) {
			w.Header().Set("X-Earlier", "1")
			w.Header().Add("Set-Cookie", "session=first")
			_, _ = w.Write([]byte("first"))
		}, false},
		{"trailers", func(w http.ResponseWriter, r *http.Request, _ *round) {
			w.Header().Set("Trailer", "X-Earlier-Trailer")
			_, _ = w.Write([]byte("first"))
			w.Header().Set("X-Earlier-Trailer", "t")
			w.Header().Set(http.TrailerPrefix+"X-Earlier-Prefixed", "p")
		}, false},
		{"early hints", func(w http.ResponseWriter, r *http.Request, _ *round) {
			w.Header().Set("Link", "</first.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("X-Earlier", "1")
		}, false},
		{"head", func(w http.ResponseWriter, r *http.Request, _ *round) {
			w.Header().Set("X-Earlier", "1")
			_, _ = w.Write([]byte("<html>"))
		}, false},
		{"panic", func(w http.ResponseWriter, r *http.Request, _ *round) {
			w.Header().Set("X-Earlier", "1")
			panic(http.ErrAbortHandler)
		}, false},
		{"reset", func(w http.ResponseWriter, r *http.Request, _ *round) {
			w.Header().Set("X-Earlier", "1")
			_, _ = w.Write([]byte("first")) // held, never sent
			<-r.Context().Done()
			w.Header().Set("X-Earlier-After-Reset", "1")
		}, true},
		{"left behind", func(w http.ResponseWriter, r *http.Request, rd *round) {
			w.Header().Set("X-Earlier", "1")
			h := r.Header
			go func() {
				// Runs on after its handler returned, while the next
				// stream's handler runs: what it touches must be its own.
				<-rd.second
				w.Header().Set("X-Earlier-Late", "1")
				_, _ = w.Write([]byte("late"))
				_ = h.Get("X-Earlier-Req")
				close(rd.late)
			}()
		}, false},
	} {
		for _, reuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/streams reused %v", tc.name, reuse), func(t *testing.T) {
				var cur atomic.Pointer[round]
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					rd := cur.Load()
					if r.URL.Path == "/first" {
						r.Header.Set("X-Earlier-Added", "1") // as the gateway's observe layer adds X-Request-Id
						rd.entered <- struct{}{}
						tc.first(w, r, rd)
						return
					}
					seenW := keys(w.Header())
					close(rd.second)
					if tc.name == "left behind" {
						<-rd.late
					}
					w.Header().Set("X-Seen-Response", seenW)
					w.Header().Set("X-Seen-Request", keys(r.Header))
					w.Header().Set("X-Seen-Late", keys(w.Header()))
					_, _ = w.Write([]byte("second"))
				})
				// With RequestDone saying what the gateway's would (nothing
				// holds the request but for the goroutine left behind), the
				// streams themselves are reused too.
				o := Options{Handler: h}
				if reuse {
					o.RequestContext = func(ctx context.Context) context.Context { return ctx }
					o.RequestDone = func(context.Context) bool { return tc.name != "left behind" }
				}
				s, addr := serve(t, o)
				rc := dialRaw(t, addr)
				method := "GET"
				if tc.name == "head" {
					method = "HEAD"
				}
				// Rounds, so that a map given back is taken again by a later
				// stream even when the pool drops one (as it does at random
				// under -race).
				for id := uint32(1); id < 16; id += 4 {
					cur.Store(&round{entered: make(chan struct{}, 1), second: make(chan struct{}), late: make(chan struct{})})
					rc.headers(id, true, reqFields(method, "/first", "x-earlier-req", "secret", "cookie", "a=b")...)
					<-cur.Load().entered
					if tc.reset {
						_ = rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
					} else {
						rc.response(id)
					}
					waitHandlers(t, s)
					rc.headers(id+2, true, reqFields("GET", "/second", "x-later", "1")...)
					fields, body := rc.response(id + 2)
					if body != "second" {
						t.Errorf("stream %d's body is %q, want %q", id+2, body, "second")
					}
					for i := 0; i+1 < len(fields); i += 2 {
						if strings.HasPrefix(fields[i], "x-earlier") || fields[i] == "set-cookie" || fields[i] == "link" {
							t.Errorf("stream %d's response has stream %d's %s: %s", id+2, id, fields[i], fields[i+1])
						}
					}
					got := fieldMap(fields)
					for k, want := range map[string]string{
						"x-seen-response": "",
						"x-seen-request":  "X-Later",
						"x-seen-late":     "X-Seen-Request,X-Seen-Response",
					} {
						if got[k] != want {
							t.Errorf("stream %d: %s = %q, want %q", id+2, k, got[k], want)
						}
					}
				}
			})
		}
	}
}

// round is one pair of streams of TestNoHeadersFromAnEarlierStream.
type round struct {
	entered      chan struct{} // the first stream's handler runs
	second, late chan struct{} // the second's runs; a left-behind goroutine is done
}

// oneP runs the test on one P: sync.Pool gives a value back first to the
// P that put it, so a map or buffer a stream's handler gives back is the
// one the next stream takes (the connection's goroutine and the
// handler's may otherwise run on different Ps), and the tests see reuse.
func oneP(t *testing.T) {
	n := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(n) })
}

// TestHeldMapsAreNotReused: a handler still running (its stream open,
// or reset by the client, which ends the stream for the client but not
// the handler) keeps its request's and response's header maps while
// later streams on the connection come and go; run with -race, a map
// handed to a later stream while it is held is also a data race.
func TestHeldMapsAreNotReused(t *testing.T) {
	oneP(t)
	for _, reset := range []bool{false, true} {
		name := "open"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			held := make(chan string, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := r.Header.Get("X-N")
				w.Header().Set("X-N", n)
				if n != "1" {
					w.Header().Set("X-Seen-Request", keys(r.Header))
					return
				}
				rh, wh := r.Header, w.Header()
				close(entered)
				<-release
				// Written as well as read: a later stream's use of the same
				// map is then a race the detector reports.
				rh.Set("X-Checked", "1")
				wh.Set("X-Checked", "1")
				held <- keys(rh) + " " + rh.Get("X-N") + " " + keys(wh) + " " + wh.Get("X-N")
			})
			_, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			rc.headers(1, true, reqFields("GET", "/", "x-n", "1", "x-first", "1")...)
			<-entered
			if reset {
				_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			}
			for id := uint32(3); id <= 11; id += 2 {
				n := fmt.Sprint(id)
				rc.headers(id, true, reqFields("GET", "/", "x-n", n)...)
				fields, _ := rc.response(id)
				got := fieldMap(fields)
				if got["x-n"] != n || got["x-seen-request"] != "X-N" || got["x-checked"] != "" {
					t.Errorf("stream %d: response fields %q", id, fields)
				}
			}
			close(release)
			if got, want := <-held, "X-Checked,X-First,X-N 1 X-Checked,X-N 1"; got != want {
				t.Errorf("stream 1's handler held %q, want %q", got, want)
			}
			if !reset {
				fields, _ := rc.response(1)
				if got := fieldMap(fields); got["x-checked"] != "1" || got["x-n"] != "1" {
					t.Errorf("stream 1: response fields %q", fields)
				}
			}
		})
	}
}

// TestBuffersStayWithACallInProgress: a call on the response that began
// before its handler returned (a goroutine the handler left behind,
// waiting in Write for window with the held bytes in hand: the handler's
// race, but one that must reach only its own response) keeps the
// response's buffers from later streams. The call is stood for by
// enter, which such a Write made.
func TestBuffersStayWithACallInProgress(t *testing.T) {
	for _, inProgress := range []bool{false, true} {
		t.Run(fmt.Sprint("in progress ", inProgress), func(t *testing.T) {
			got := make(chan *responseWriter, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte("held"))
				rw := w.(*responseWriter)
				if inProgress && !rw.enter() {
					t.Error("enter refused while the handler runs")
				}
				got <- rw
			})
			s, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			rc.headers(1, true, reqFields("GET", "/")...)
			if _, body := rc.response(1); body != "held" {
				t.Errorf("body %q", body)
			}
			waitHandlers(t, s) // under cn.mu, after recycle: what it did is seen
			rw := <-got
			if kept := rw.bufs != nil; kept != inProgress {
				t.Errorf("buffers kept by the stream: %v, want %v", kept, inProgress)
			}
			if inProgress {
				rw.leave()
				if rw.enter() {
					t.Error("enter let a call in after the handler returned")
				}
			}
		})
	}
}

// TestNoBodyFromAnEarlierStream: a request body's buffer holds nothing of
// an earlier stream's body (bytes its handler left unread), and a
// goroutine an earlier handler left reading its body gets an error, not
// a later stream's bytes.
func TestNoBodyFromAnEarlierStream(t *testing.T) {
	oneP(t)
	type late struct {
		n   int
		err error
	}
	var second atomic.Pointer[chan struct{}]
	lateRead := make(chan late, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			var one [1]byte
			_, _ = io.ReadFull(r.Body, one[:]) // the rest stays in the buffer
			body, ch := r.Body, *second.Load()
			go func() {
				<-ch
				var p [64]byte
				n, err := body.Read(p[:])
				lateRead <- late{n, err}
			}()
			return
		}
		close(*second.Load())
		b, _ := io.ReadAll(r.Body)
		l := <-lateRead
		w.Header().Set("X-Late", fmt.Sprint(l.n, l.err != nil))
		_, _ = w.Write(b)
	})
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	for id := uint32(1); id < 16; id += 4 {
		ch := make(chan struct{})
		second.Store(&ch)
		rc.headers(id, false, reqFields("POST", "/first")...)
		_ = rc.fr.WriteData(id, true, []byte("earlier stream's body"))
		rc.response(id)
		waitHandlers(t, s)
		rc.headers(id+2, false, reqFields("POST", "/second")...)
		_ = rc.fr.WriteData(id+2, true, []byte("b"))
		fields, body := rc.response(id + 2)
		if got := fieldMap(fields)["x-late"]; body != "b" || got != "0 true" {
			t.Errorf("stream %d: body %q, x-late %q; want %q, %q", id+2, body, got, "b", "0 true")
		}
	}
}

// TestHeaderMapStaysWithACallInProgress: the response's header map, like
// its buffers, stays with the stream while a call that began before its
// handler returned is still in it: such a call (a left-behind goroutine's
// first Write) encodes the map (writeHeader), so the map given to a later
// stream, as its request's or response's, would put that stream's fields,
// a cookie or an authorization, into this response, for this client.
func TestHeaderMapStaysWithACallInProgress(t *testing.T) {
	oneP(t)
	var first atomic.Pointer[responseWriter]
	seen := make(chan [2]uintptr, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			rw := w.(*responseWriter)
			if !rw.enter() { // stands for the left-behind Write, in writeHeader
				t.Error("enter refused while the handler runs")
			}
			first.Store(rw)
			return
		}
		seen <- [2]uintptr{reflect.ValueOf(r.Header).Pointer(), reflect.ValueOf(w.Header()).Pointer()}
	})
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	for id := uint32(1); id < 32; id += 4 {
		rc.headers(id, true, reqFields("GET", "/first")...)
		rc.response(id)
		waitHandlers(t, s)
		rw := first.Load()
		held := reflect.ValueOf(rw.hdr).Pointer()
		rc.headers(id+2, true, reqFields("GET", "/second", "authorization", "secret")...)
		got := <-seen
		rc.response(id + 2)
		rw.leave()
		if got[0] == held || got[1] == held {
			t.Fatalf("stream %d got the header map stream %d's call in progress still encodes", id+2, id)
		}
	}
}

// TestNoBytesFromAStreamCutMidWrite: a response cut while its held body
// waits for a window the client never opens (the client resets the
// stream, or closes the connection) gives its buffers back with those
// bytes still in them; a later stream, on the same connection or
// another, sends only its own.
func TestNoBytesFromAStreamCutMidWrite(t *testing.T) {
	oneP(t)
	for _, closeConn := range []bool{false, true} {
		t.Run(fmt.Sprint("close ", closeConn), func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/first" {
					w.Header().Set("X-Earlier", "1")
					_, _ = io.WriteString(w, strings.Repeat("secret;", 100)) // held: no window
					return
				}
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, "ok")
			})
			s, addr := serve(t, Options{Handler: h})
			later := dialRaw(t, addr)
			for id := uint32(1); id < 16; id += 4 {
				rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
				rc.headers(1, true, reqFields("GET", "/first")...)
				rc.until("stream 1's head", func(f http2.Frame) bool {
					_, ok := f.(*http2.MetaHeadersFrame)
					return ok
				})
				if closeConn {
					rc.c.Close()
				} else {
					_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
				}
				waitHandlers(t, s)
				later.headers(id, true, reqFields("GET", "/second")...)
				fields, body := later.response(id)
				if body != "ok" {
					t.Errorf("stream %d's body is %q", id, body)
				}
				if got := fieldMap(fields); got["x-earlier"] != "" || got["content-length"] != "2" {
					t.Errorf("stream %d: fields %q", id, fields)
				}
			}
		})
	}
}
