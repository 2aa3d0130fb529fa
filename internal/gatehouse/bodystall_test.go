package gatehouse

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestStalledUploadGets408: a client that stops sending its request body
// midway gets 408 problem+json once listeners.idle_timeout passes with no
// byte, and the host's read of the body ends then too, instead of the
// gateway and the host holding the request for as long as the client
// likes.
func TestStalledUploadGets408(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listeners.IdleTimeout = time.Second
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/web", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	hostErr := make(chan error, 1)
	startHost(t, r, "web-1", "web", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, err := io.Copy(io.Discard, req.Body)
		hostErr <- err
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("web")) == 1 }, "host not routable")

	c, err := net.Dial("tcp", r.g.Addrs().HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: web.test.local\r\nContent-Length: 100\r\n\r\n0123456789"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a stalled upload got no answer after %v: %v", time.Since(start), err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("a stalled upload = %d %s, want 408 problem+json", res.StatusCode, res.Header.Get("Content-Type"))
	}
	select {
	case err := <-hostErr:
		if err == nil {
			t.Fatal("the host read the cut body to a clean end")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the host still reads the stalled body")
	}
}
