package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/host"
)

// zeros is an endless upload that counts the bytes taken from it.
type zeros struct{ n atomic.Int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

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
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			held <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/count":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, strconv.FormatInt(n, 10))
		}
	}))
	app.Config.Protocols = new(http.Protocols)
	app.Config.Protocols.SetUnencryptedHTTP2(true)
	// The app's own server leaves its connection room past a held
	// stream's window: the sidecar puts its requests to the app on one
	// connection too, and an app with net/http's defaults (1 MiB each)
	// starves the second stream there, which is the app's own setting.
	app.Config.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 1 << 20}
	app.Start()
	t.Cleanup(app.Close)
	t.Cleanup(func() { close(release) }) // before app.Close, which waits for /hold
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
	var up1 zeros
	req1, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/hold", &up1)
	if err != nil {
		t.Fatal(err)
	}
	held1 := make(chan struct{})
	go func() {
		defer close(held1)
		if res, err := cc.RoundTrip(req1); err == nil {
			res.Body.Close()
		}
	}()
	defer func() { cancel(); <-held1 }()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the held upload never reached the app")
	}
	// Until the held upload stops moving: every window on its way is
	// full. Five looks 50ms apart that find the count unchanged.
	for last, same := int64(-1), 0; same < 5; {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("the held upload still moves after %d bytes", up1.n.Load())
		}
		if n := up1.n.Load(); n == last {
			same++
		} else {
			last, same = n, 0
		}
	}

	body := strings.Repeat("u", 256<<10)
	req2, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/count", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := cc.RoundTrip(req2)
	if err != nil {
		t.Fatalf("an upload beside a held one (%d bytes sent on it): %v", up1.n.Load(), err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if want := strconv.Itoa(len(body)); res.StatusCode != http.StatusOK || string(b) != want || err != nil {
		t.Errorf("an upload beside a held one (%d bytes sent on it): %d %.80q %v, want 200 %q", up1.n.Load(), res.StatusCode, b, err, want)
	}
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
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// Its answer comes after what the sidecar sends first.
	if err := fr.WritePing(false, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	// RFC 9113 §6.9.2: 65535 each until SETTINGS and WINDOW_UPDATE say
	// otherwise.
	stream, conn := int64(65535), int64(65535)
	for pinged := false; !pinged; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the sidecar's first frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				stream = int64(v)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn += int64(f.Increment)
			}
		case *http2.PingFrame:
			pinged = f.IsAck()
		}
	}
	if conn < 2*stream || conn > 4<<20 {
		t.Errorf("windows: a stream's %d, the connection's %d; want the connection's at least two streams' and at most 4 MiB", stream, conn)
	}
}
