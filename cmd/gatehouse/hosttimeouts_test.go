package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
)

// TestSidecarClosesSilentClients: whoever reaches the sidecar's address
// (it listens for the gateways, but a port is open to its network) cannot
// hold its connections by sending nothing: a connection that sends half a
// request line, one idle after an answer (or with the start of the next
// request alone), and an h2c connection with no stream are closed within
// the bounds. An answer that streams for longer than them, and an
// upgraded connection idle longer than them (the stall bound on too),
// are not cut.
func TestSidecarClosesSilentClients(t *testing.T) {
	const bound = 300 * time.Millisecond
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow": // 10 parts over 4 bounds
			for i := range 10 {
				_, _ = io.WriteString(w, strconv.Itoa(i))
				w.(http.Flusher).Flush()
				time.Sleep(bound * 4 / 10)
			}
		case "/upgrade":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(c, brw)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(app.Close)
	up, err := url.Parse(app.URL)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(t *testing.T, scheme string) string {
		tm := sidecarTimeouts{readHeader: bound, idle: bound, stall: bound}
		srv := sidecarServer(sidecarProxy(up, scheme, slog.New(slog.DiscardHandler)), scheme, tm)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); _ = srv.Serve(sidecarListener(ln, tm)) }()
		t.Cleanup(func() { srv.Close(); <-served })
		return ln.Addr().String()
	}
	dial := func(t *testing.T, addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed reads c until the sidecar closes it, failing if it is still
	// open long past the bound.
	closed := func(t *testing.T, c net.Conn, what string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the connection is still open 10 s on (bound %s)", what, bound)
		}
	}
	get := func(t *testing.T, c net.Conn, br *bufio.Reader, path string) {
		t.Helper()
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: hello.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %q %v", path, res.StatusCode, b, err)
		}
	}

	t.Run("http", func(t *testing.T) {
		addr := serve(t, host.SchemeHTTP)
		c := dial(t, addr)
		if _, err := io.WriteString(c, "GET /x HT"); err != nil {
			t.Fatal(err)
		}
		closed(t, c, "half a request line")

		c = dial(t, addr)
		get(t, c, bufio.NewReader(c), "/")
		closed(t, c, "idle after an answer")

		c = dial(t, addr)
		get(t, c, bufio.NewReader(c), "/")
		if _, err := io.WriteString(c, "GE"); err != nil {
			t.Fatal(err)
		}
		closed(t, c, "the next request's first bytes alone")

		// Long answers and upgrades go on past the bounds.
		c = dial(t, addr)
		get(t, c, bufio.NewReader(c), "/slow")
		c = dial(t, addr)
		br := bufio.NewReader(c)
		if _, err := io.WriteString(c, "GET /upgrade HTTP/1.1\r\nHost: hello.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", res, err)
		}
		time.Sleep(3 * bound) // idle past both bounds: what is tested is that nothing cuts it
		if _, err := io.WriteString(c, "hello"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if b, err := io.ReadAll(io.LimitReader(br, 5)); string(b) != "hello" {
			t.Fatalf("an upgraded connection idle for %s: echoed %q, %v", 3*bound, b, err)
		}
	})

	t.Run("h2c", func(t *testing.T) {
		addr := serve(t, host.SchemeH2C)
		c := dial(t, addr)
		if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM"); err != nil {
			t.Fatal(err)
		}
		closed(t, c, "half a preface")

		c = dial(t, addr)
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		closed(t, c, "an h2c connection with no stream")
	})
}

// The sidecar's bounds are the gateway's listeners' defaults, which its
// clients (gateways) are built around: their idle connections to hosts
// are kept 90 s, closed before the sidecar closes them.
func TestSidecarTimeoutsAreTheGatewaysDefaults(t *testing.T) {
	l := config.Default().Listeners
	if sidecarDefaults.readHeader != l.ReadHeaderTimeout || sidecarDefaults.idle != l.IdleTimeout {
		t.Errorf("sidecar read header %s, idle %s; the gateway's listeners %s, %s",
			sidecarDefaults.readHeader, sidecarDefaults.idle, l.ReadHeaderTimeout, l.IdleTimeout)
	}
	// The gateway bounds its clients' stalled uploads and unread answers
	// by its idle timeout (internal/edge).
	if sidecarDefaults.stall != l.IdleTimeout {
		t.Errorf("sidecar stall %s; the gateway's listeners' %s", sidecarDefaults.stall, l.IdleTimeout)
	}
	if sidecarDefaults.idle <= 90*time.Second {
		t.Errorf("sidecar idle %s: a gateway keeps an idle connection to a host 90 s, and would send on one the sidecar closes", sidecarDefaults.idle)
	}
}
