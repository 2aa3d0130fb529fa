package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// endlessZeros is an endless upload that counts the bytes taken from it.
type endlessZeros struct{ n atomic.Int64 }

func (z *endlessZeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

// TestH2HeldUploadLeavesOthersRoom: on one HTTP/2 connection (a browser
// puts all its requests to the gateway on one), a request whose handler
// takes none of its upload and stays open (a host that does not read it)
// does not stop another upload on the same connection, with either
// server. net/http's at its defaults gave a connection no more window
// than a stream (1 MiB): the held stream's unread bytes filled it, the
// client could send no byte of the other upload, and idle_timeout failed
// it (408).
func TestH2HeldUploadLeavesOthersRoom(t *testing.T) {
	t.Parallel()
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		t.Parallel()
		held := make(chan struct{}, 1)
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/hold": // reads nothing, answers only once released
				held <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done():
				}
			case "/count":
				n, err := io.Copy(io.Discard, r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusRequestTimeout)
					return
				}
				_, _ = fmt.Fprint(w, n)
			}
		})
		// The stall bound: long enough that a loaded machine does not
		// make an upload that moves look stalled.
		e := impl.start(t, Options{Handler: h, IdleTimeout: time.Second})
		var (
			dials  atomic.Int32
			mu     sync.Mutex
			dialed []net.Conn
		)
		d := &net.Dialer{Timeout: 5 * time.Second}
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}},
			ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				c, err := d.DialContext(ctx, network, addr)
				if err == nil {
					mu.Lock()
					dialed = append(dialed, c)
					mu.Unlock()
				}
				return c, err
			},
		}
		// Closed before the edge drains: net/http's HTTP/2 server waits a
		// second after its GOAWAY for a client that keeps its connection.
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range dialed {
				c.Close()
			}
		})
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		post := func(path string, body io.Reader) (*http.Response, error) {
			req, err := http.NewRequest("POST", "https://"+e.https+path, body)
			if err != nil {
				return nil, err
			}
			req.Host = "api." + zone
			return c.Do(req)
		}

		var up endlessZeros
		holdDone := make(chan error, 1)
		go func() {
			resp, err := post("/hold", &up)
			if err == nil {
				resp.Body.Close()
			}
			holdDone <- err
		}()
		defer func() {
			close(release)
			<-holdDone // its error, if any, is the connection's end at cleanup
		}()
		select {
		case <-held:
		case <-time.After(5 * time.Second):
			t.Fatal("the held upload's handler never ran")
		}
		// The client takes the next part of a body only once it has sent
		// the last: past a stream's window (1 MiB with either server), the
		// held stream has taken all the window it will ever get.
		for deadline := time.Now().Add(5 * time.Second); up.n.Load() <= 1<<20; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the held upload sent only %d bytes", up.n.Load())
			}
		}

		const size = 256 << 10
		start := time.Now()
		resp, err := post("/count", bytes.NewReader(make([]byte, size)))
		if err != nil {
			t.Fatalf("an upload beside a held one: %v", err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(size) {
			t.Fatalf("an upload beside a held one (%d bytes taken from that one's body): %d %q after %v, want 200 %q",
				up.n.Load(), resp.StatusCode, got, time.Since(start).Round(time.Millisecond), fmt.Sprint(size))
		}
		if resp.ProtoMajor != 2 || dials.Load() != 1 {
			t.Fatalf("the uploads went over %s on %d connections, want HTTP/2 on one", resp.Proto, dials.Load())
		}
		select {
		case err := <-holdDone:
			t.Fatalf("the held upload ended before the other was answered: %v", err)
		default:
		}
	})
}

// TestH2WindowsAgree: both HTTP/2 servers advertise the same receive
// windows, a stream's (SETTINGS_INITIAL_WINDOW_SIZE) and the
// connection's, and give a connection more than a stream (see the test
// above): turning listeners.fast_path off changes neither how fast one
// upload goes nor what a connection may make the gateway hold.
func TestH2WindowsAgree(t *testing.T) {
	t.Parallel()
	type windows struct{ stream, conn int64 }
	got := map[string]windows{}
	for _, impl := range h2Impls {
		e := impl.start(t, Options{})
		cl := dialRawH2(t, e.https)
		w := windows{stream: int64(cl.setting(http2.SettingInitialWindowSize)), conn: 65535} // RFC 9113 §6.9.2
		for {
			f, err := cl.read()
			if err != nil {
				t.Fatalf("%s: no WINDOW_UPDATE on the connection (its window %d): %v", impl.name, w.conn, err)
			}
			if wu, ok := f.(*http2.WindowUpdateFrame); ok && wu.StreamID == 0 {
				w.conn += int64(wu.Increment)
				break
			}
		}
		got[impl.name] = w
	}
	own, std := got[h2Impls[0].name], got[h2Impls[1].name]
	if own != std || own.conn < 2*own.stream {
		t.Fatalf("windows (a stream's, the connection's): %v; want the same with each server, the connection's at least two streams'", got)
	}
}
