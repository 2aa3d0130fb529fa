package h2

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestWindowUpdatesOfClientsWithoutData: the bound on WINDOW_UPDATEs
// (windowUpdatesFree) must never cut a client that is making requests,
// however few DATA frames it is sent: each request that starts makes the
// updates before it no flood. Clients whose updates are not tied to DATA
// at all: one that sends a window for every stream it opens (curl grows
// each stream's window at its open), and one that sends updates for its
// own bookkeeping after each answer of HEAD requests and 204s, which
// carry no DATA, one at a time or in batches at the concurrency limit.
func TestWindowUpdatesOfClientsWithoutData(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = io.WriteString(w, "ok") // not sent to a HEAD
	})
	_, dial := serveTLS(t, Options{Handler: h})
	const requests = 3000
	for _, tt := range []struct {
		name  string
		batch int // streams opened before their answers are read
		path  string
		// before and after the answer: the updates the client sends
		atOpen, afterAnswer bool
	}{
		{"HEAD, updates after each answer", 1, "/", false, true},
		{"204, updates after each answer", 1, "/204", false, true},
		{"HEAD, batches at the limit, updates after", defaultMaxStreams, "/", false, true},
		{"curl-like, a window at each stream's open", 1, "/204", true, false},
		{"curl-like, batches at the limit", defaultMaxStreams, "/", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			method := "GET"
			if tt.path == "/" {
				method = "HEAD"
			}
			id := uint32(1)
			for sent := 0; sent < requests; {
				first := id
				n := min(tt.batch, requests-sent)
				for range n {
					rc.headers(id, true, reqFields(method, tt.path)...)
					if tt.atOpen {
						if err := rc.fr.WriteWindowUpdate(id, 10<<20-65535); err != nil {
							t.Fatal(err)
						}
					}
					id += 2
				}
				for answered := 0; answered < n; answered++ {
					// Answers come in any order: each is the first of its stream.
					f := rc.nextOf("an answer")
					if _, ok := f.(*http2.MetaHeadersFrame); !ok {
						answered--
						continue
					}
					if got := f.(*http2.MetaHeadersFrame).PseudoValue("status"); !strings.HasPrefix(got, "20") {
						t.Fatalf("request %d: status %q", sent+answered, got)
					}
				}
				if tt.afterAnswer {
					for i := range n {
						if err := rc.fr.WriteWindowUpdate(first+2*uint32(i), 1024); err != nil {
							t.Fatal(err)
						}
						if err := rc.fr.WriteWindowUpdate(0, 1024); err != nil {
							t.Fatal(err)
						}
					}
				}
				sent += n
			}
			_ = rc.fr.WritePing(false, probe)
			if got := rc.verdict(); got != "alive" {
				t.Fatalf("after %d requests: %s, want alive", requests, got)
			}
		})
	}
}

// nextOf reads the next frame that is not a SETTINGS, PING or
// WINDOW_UPDATE, failing the test on GOAWAY or the connection's end.
func (rc *rawClient) nextOf(what string) http2.Frame {
	rc.t.Helper()
	for {
		f, err := rc.next()
		if err != nil {
			rc.t.Fatalf("waiting for %s: %v", what, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			rc.t.Fatalf("waiting for %s: GOAWAY %v", what, f.ErrCode)
		case *http2.SettingsFrame, *http2.PingFrame, *http2.WindowUpdateFrame:
		default:
			return f
		}
	}
}

// TestManySmallDownloads: Go's client, many small responses on one
// connection, many at once, read in small pieces: its updates (one for
// the connection each 4 KiB read, one for a stream when its window runs
// low) must never add up to a GOAWAY.
func TestManySmallDownloads(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var size int
		_, _ = fmt.Sscanf(r.URL.Query().Get("n"), "%d", &size)
		_, _ = w.Write(make([]byte, size))
	})
	_, addr := serve(t, Options{Handler: h})
	for _, tt := range []struct {
		name        string
		conf        *http.HTTP2Config
		size, read  int
		concurrency int
	}{
		{"3 KiB, 512 B reads", nil, 3 << 10, 512, 32},
		{"20 KiB, 1 KiB reads", nil, 20 << 10, 1 << 10, 32},
		{"20 KiB, small windows", &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 10, MaxReceiveBufferPerConnection: 64 << 10}, 20 << 10, 100, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each its own client and connection
			tr := &http.Transport{Protocols: new(http.Protocols), HTTP2: tt.conf}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
			const requests = 2000
			work := make(chan int, requests)
			for i := range requests {
				work <- i
			}
			close(work)
			errs := make(chan error, tt.concurrency)
			var wg sync.WaitGroup
			for range tt.concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						if err := download(c, fmt.Sprintf("http://%s/?n=%d", addr, tt.size), tt.read, tt.size); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}
