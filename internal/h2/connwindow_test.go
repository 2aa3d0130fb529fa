package h2

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

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
	hu := testutil.NewHeldUpload()
	// A handler that reads nothing never opens its stream's window again:
	// the held upload has all it will get once the server has taken that.
	hu.Stopped = func(r *http.Request, _ int64) bool {
		st := r.Body.(*reqBody).st
		st.cn.mu.Lock()
		defer st.cn.mu.Unlock()
		return st.recvWin == 0
	}
	cert, pool := testutil.SelfSigned(t, "a.example")
	var conns atomic.Int32
	_, addr := serveWrapped(t, Options{Handler: hu, BodyStall: stall}, func(c net.Conn) net.Conn {
		conns.Add(1)
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		_ = tc.Handshake()
		return tc
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "a.example"}, Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	res := hu.Run(t, c.Do, "https://"+addr)
	if n := conns.Load(); n != 1 {
		t.Fatalf("the two uploads went over %d connections, want one", n)
	}
	if res.HeldEnded {
		t.Fatalf("the held upload ended before the other was answered: %v", res.HeldErr)
	}
	if res.HeldErr != nil {
		t.Errorf("the held upload, once released: %v", res.HeldErr)
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
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stream, conn := testutil.H2Windows(t, c)
	if stream < 1<<20 || conn < 2*stream || conn > 4<<20 {
		t.Fatalf("windows: a stream's %d, the connection's %d; want a stream's at least 1 MiB, the connection's at least two streams' and at most 4 MiB", stream, conn)
	}
}
