package h2

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// countingZeros is an endless upload that counts the bytes taken from it.
type countingZeros struct{ n atomic.Int64 }

func (z *countingZeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

// TestHeldUploadStarvesNoOtherStream: on one connection (a browser puts
// all its requests to the gateway on one), a stream whose handler takes
// none of its upload, and stays open (a host that does not read it),
// does not stop the other streams' uploads: another stream on the same
// connection uploads 256 KiB and is answered. With the connection's
// window no larger than a stream's, the held stream's unread bytes
// filled it, no other stream could send a byte, and BodyStall (the
// edge's idle_timeout) failed their bodies: 408 behind the gateway.
func TestHeldUploadStarvesNoOtherStream(t *testing.T) {
	t.Parallel()
	// Long enough that a loaded machine does not make an upload that
	// moves look stalled.
	const stall = 500 * time.Millisecond
	held := make(chan *reqBody, 1)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold": // reads nothing, answers only once released
			held <- r.Body.(*reqBody)
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
	cert, pool := testutil.SelfSigned(t, "a.example")
	var conns atomic.Int32
	_, addr := serveWrapped(t, Options{Handler: h, BodyStall: stall}, func(c net.Conn) net.Conn {
		conns.Add(1)
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		_ = tc.Handshake()
		return tc
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "a.example"}, Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	base := "https://" + addr

	// Stream 1: an endless upload to the handler that holds it.
	var up countingZeros
	holdDone := make(chan error, 1)
	go func() {
		resp, err := c.Post(base+"/hold", "application/octet-stream", &up)
		if err == nil {
			resp.Body.Close()
		}
		holdDone <- err
	}()
	defer func() {
		close(release)
		if err := <-holdDone; err != nil {
			t.Errorf("the held upload, once released: %v", err)
		}
	}()
	var body *reqBody
	select {
	case body = <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the held upload's handler never ran")
	}
	// Its upload stops moving once the server has taken all the stream's
	// window allows: a handler that reads nothing never opens it again.
	stopped := func() bool {
		body.st.cn.mu.Lock()
		defer body.st.cn.mu.Unlock()
		return body.st.recvWin == 0
	}
	for deadline := time.Now().Add(5 * time.Second); !stopped(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the held upload still moves after %d bytes", up.n.Load())
		}
	}

	// Stream 2, on the same connection: 256 KiB, read as it comes.
	const size = 256 << 10
	start := time.Now()
	resp, err := c.Post(base+"/count", "application/octet-stream", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatalf("an upload beside a held one: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(size) {
		t.Fatalf("an upload beside a held one (%d bytes taken from that one's body): %d %q after %v, want 200 %q",
			up.n.Load(), resp.StatusCode, got, time.Since(start).Round(time.Millisecond), fmt.Sprint(size))
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("the two uploads went over %d connections, want one", n)
	}
	select {
	case err := <-holdDone:
		t.Fatalf("the held upload ended before the other was answered: %v", err)
	default:
	}
}

// TestAdvertisedWindows: the first SETTINGS and WINDOW_UPDATE a client
// reads give a stream a window as large as before (1 MiB: one upload's
// pace over a long round trip is the stream's window a round trip) and
// the connection several of those, so that a stream whose handler reads
// none of its upload leaves the others room (the test above), but no
// more than 4 MiB: what one connection can make the server hold of
// uploads no handler has read.
func TestAdvertisedWindows(t *testing.T) {
	t.Parallel()
	_, dial := serveTLS(t, Options{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
	rc := dial()
	stream, conn := int64(-1), int64(65535) // RFC 9113 §6.9.2: the connection's starts at 65,535
	rc.until("the server's SETTINGS and its WINDOW_UPDATE on the connection", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					stream = int64(v)
				} else {
					stream = 65535
				}
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn += int64(f.Increment)
				return true
			}
		}
		return false
	})
	if stream < 1<<20 || conn < 2*stream || conn > 4<<20 {
		t.Fatalf("windows: a stream's %d, the connection's %d; want a stream's at least 1 MiB, the connection's at least two streams' and at most 4 MiB", stream, conn)
	}
}
