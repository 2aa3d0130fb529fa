package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStreamsSeeOnlyTheirOwn runs many streams at once on one connection,
// of every shape whose state the server reuses (header maps, header
// blocks, held bodies, request bodies): bodies in both directions, HEAD,
// 103 Early Hints, trailers, a client reset while the handler writes
// into a shut window, a handler that panics, one that leaves a goroutine
// writing behind, one that drains its connection (GOAWAY). Each handler checks that its request is its own and
// that its response map starts empty; the client checks that each
// response carries its own stream's fields and bytes only. Under -race,
// a map or buffer reused while held is also a report.
func TestStreamsSeeOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	const n, workers = 240, 8
	var left sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/p/")
		var i int
		if _, err := fmt.Sscan(id, &i); err != nil {
			t.Errorf("path %q", r.URL.Path)
			return
		}
		if len(w.Header()) != 0 {
			t.Errorf("stream for %d: response map starts with %q", i, keys(w.Header()))
		}
		if got := r.Header["X-Id"]; len(got) != 1 || got[0] != id || r.Header.Get("Cookie") != "c="+id || r.URL.RawQuery != "id="+id {
			t.Errorf("request %d: x-id %q, cookie %q, query %q", i, got, r.Header.Get("Cookie"), r.URL.RawQuery)
		}
		w.Header().Set("X-Id", id)
		w.Header().Set("X-Only-"+id, "1")
		if i%13 == 0 {
			w.Header().Set("Connection", "close") // GOAWAY, streams in flight on the connection
		}
		switch i % 6 {
		case 1:
			b, err := io.ReadAll(r.Body)
			if want := strings.Repeat("req-"+id+";", 100+i); err != nil || string(b) != want {
				t.Errorf("request %d: body %d bytes, %v", i, len(b), err)
			}
		case 3:
			w.Header().Set("Link", "</"+id+".css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		case 4:
			w.Header().Set("Trailer", "X-T")
		case 5:
			// The client resets once it has the head: writes wait for a
			// window it no longer opens, until the reset.
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for r.Context().Err() == nil {
				if _, err := w.Write([]byte(strings.Repeat(id, 1000))); err != nil {
					break
				}
			}
			left.Add(1)
			rw := w.(*responseWriter)
			go func() { // left behind, writing after its handler returned
				defer left.Done()
				// Only once it has: a call racing the return is the
				// handler's race (and a data race), as with net/http, and
				// a map Header gave before it is the server's again.
				for !rw.done.Load() {
					runtime.Gosched()
				}
				for range 3 {
					w.Header().Set("X-Late-"+id, "1")
					_, _ = w.Write([]byte("late-" + id))
				}
			}()
			return
		}
		if i%11 == 0 {
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, strings.Repeat("resp-"+id+";", 50*(i%7)))
		if i%6 == 4 {
			w.Header().Set("X-T", id)
		}
	})
	s, addr := serve(t, Options{Handler: h})
	tr := &http.Transport{Protocols: new(http.Protocols), HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 10}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := oneOfMany(c, addr, i); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			}
		}()
	}
	for i := 1; i <= n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	// A reset stream's handler may run on after its client has gone: it
	// adds to left.
	waitHandlers(t, s)
	left.Wait()
}

// oneOfMany makes request i of TestStreamsSeeOnlyTheirOwn and checks its
// response.
func oneOfMany(c *http.Client, addr string, i int) error {
	id := fmt.Sprint(i)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	method, body := http.MethodGet, io.Reader(nil)
	switch i % 6 {
	case 1:
		method, body = http.MethodPost, strings.NewReader(strings.Repeat("req-"+id+";", 100+i))
	case 2:
		method = http.MethodHead
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+"/p/"+id+"?id="+id, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-Id", id)
	req.Header.Set("Cookie", "c="+id)
	res, err := c.Do(req)
	if i%11 == 0 && i%6 != 5 {
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		if err == nil {
			return errors.New("a panicking handler's response ended cleanly")
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer res.Body.Close()
	for k := range res.Header {
		if strings.HasPrefix(k, "X-Only-") && k != "X-Only-"+id || strings.HasPrefix(k, "X-Late") || k == "Link" {
			return fmt.Errorf("response has %s", k)
		}
	}
	if res.Header.Get("X-Id") != id || res.Header.Get("X-Only-"+id) != "1" {
		return fmt.Errorf("response fields %v", res.Header)
	}
	if i%6 == 5 {
		cancel() // RST_STREAM while the handler waits for window
		return nil
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	want := strings.Repeat("resp-"+id+";", 50*(i%7))
	if method == http.MethodHead {
		want = ""
	}
	if string(b) != want {
		return fmt.Errorf("body %.40q..., want %.40q...", b, want)
	}
	if got := res.Trailer.Get("X-T"); i%6 == 4 && got != id || i%6 != 4 && got != "" {
		return fmt.Errorf("trailer X-T %q", got)
	}
	return nil
}
