package h2

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestStreamReusedOnlyWhenNothingHoldsIt: a connection's next request
// lives in the stream of the one before it only when RequestDone said
// nothing the handler left can reach that request, and the request had no
// body. A request something still holds keeps what it was: a goroutine
// its handler left behind reads its own method and path after later
// requests on the connection were served, never theirs.
func TestStreamReusedOnlyWhenNothingHoldsIt(t *testing.T) {
	tests := []struct {
		name  string
		maker bool // RequestContext and RequestDone are set
		free  bool // what RequestDone says
		body  bool // the requests are POSTs with a body
		reuse bool // the second request is the first one's memory
	}{
		{"free", true, true, false, true},
		{"held", true, false, false, false},
		{"body", true, true, true, false},
		{"no maker", false, false, false, false},
	}
	const n = 8 // requests, one after another on one connection
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				seen []*http.Request
				left sync.WaitGroup
				late = make(chan struct{})
				saw  = make(chan string, n)
			)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				seen = append(seen, r)
				mu.Unlock()
				if !tc.free {
					// Left behind, as a handler may: it looks at its
					// request once later ones have been served.
					left.Add(1)
					go func() {
						defer left.Done()
						<-late
						saw <- r.Method + " " + r.URL.Path
					}()
				}
				_, _ = io.WriteString(w, r.Method+" "+r.URL.Path)
			})
			o := Options{Handler: h}
			if tc.maker {
				o.RequestContext = func(ctx context.Context) context.Context { return ctx }
				o.RequestDone = func(context.Context) bool { return tc.free }
			}
			srv, addr := serve(t, o)
			c := client(t)
			for i := range n {
				method, body := http.MethodGet, io.Reader(nil)
				if tc.body {
					method, body = http.MethodPost, strings.NewReader("payload")
				}
				req, err := http.NewRequest(method, "http://"+addr+"/"+strconv.Itoa(i), body)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := method + " /" + strconv.Itoa(i); string(got) != want {
					t.Fatalf("request %d answered %q, want %q", i, got, want)
				}
				// The stream is kept once its handler's goroutine is
				// through, which may be after the client has its answer:
				// the next request is sent after that, or it may find
				// none to reuse (as it may in use, which is no harm).
				waitHandlers(t, srv)
			}
			close(late)
			left.Wait()
			close(saw)
			var got []string
			for s := range saw {
				got = append(got, s)
			}
			slices.Sort(got)
			for i, s := range got {
				if want := "GET /" + strconv.Itoa(i); s != want {
					t.Errorf("the handlers left behind saw %q, want each its own request", got)
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != n {
				t.Fatalf("%d requests served, want %d", len(seen), n)
			}
			// The requests are held here, so two that are not the same
			// memory cannot share an address.
			distinct := map[*http.Request]bool{}
			for _, r := range seen {
				distinct[r] = true
			}
			if reused := len(distinct) < n; reused != tc.reuse {
				t.Fatalf("%d requests in %d requests' memory: reuse %v, want %v", n, len(distinct), reused, tc.reuse)
			}
		})
	}
}
