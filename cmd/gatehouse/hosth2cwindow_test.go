package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestSidecarH2CStalledUploadStarvesNoOtherStream: over one h2c
// connection (a gateway puts all its requests to a host on one), a
// stream whose app takes none of its upload, and keeps the request open,
// does not stop the other streams' uploads: another stream on the same
// connection uploads and is answered 200. With the connection's window
// no larger than a stream's (net/http's 1 MiB each), the held stream's
// unread bytes filled it, no other stream could send a byte, and the
// stall bound answered them 408.
func TestSidecarH2CStalledUploadStarvesNoOtherStream(t *testing.T) {
	t.Parallel()
	// The stall bound answers a starved upload 408; long enough that a
	// loaded machine does not make one that moves look starved.
	const bound = 500 * time.Millisecond
	hu := testutil.NewHeldUpload()
	app := httptest.NewUnstartedServer(hu)
	app.Config.Protocols = new(http.Protocols)
	app.Config.Protocols.SetUnencryptedHTTP2(true)
	// The app's own server leaves its connection room past a held
	// stream's window: the sidecar puts its requests to the app on one
	// connection too, and an app with net/http's defaults (1 MiB each)
	// starves the second stream there, which is the app's own setting.
	app.Config.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 1 << 20}
	app.Start()
	t.Cleanup(app.Close)
	up, err := url.Parse(app.URL)
	if err != nil {
		t.Fatal(err)
	}
	tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: bound}
	addr := runSidecar(t, sidecarProxy(up, host.SchemeH2C, slog.New(slog.DiscardHandler)), host.SchemeH2C, tm)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// One h2c connection, both streams on it (x/net/http2's Transport
	// with AllowHTTP is deprecated for this).
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	cc, err := tr.NewClientConn(ctx, "http", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// The held upload has all it will get once every window on its way
	// is full: Stopped's default, its count unchanged.
	hu.Run(t, cc.RoundTrip, "http://"+addr)
}

// TestSidecarH2CWindowsBoundUploadsHeld: what an h2c client may send the
// sidecar ahead of the app taking it, as its first frames say: a
// connection's window room for a stream the app holds and more beside
// it (at least two streams' windows), and bounded, at most 4 MiB a
// connection held in memory for uploads the app has not taken.
func TestSidecarH2CWindowsBoundUploadsHeld(t *testing.T) {
	t.Parallel()
	tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: time.Minute}
	addr := runSidecar(t, http.NotFoundHandler(), host.SchemeH2C, tm)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stream, conn := testutil.H2Windows(t, c)
	if conn < 2*stream || conn > 4<<20 {
		t.Errorf("windows: a stream's %d, the connection's %d; want the connection's at least two streams' and at most 4 MiB", stream, conn)
	}
}
