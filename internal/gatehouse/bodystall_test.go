package gatehouse

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
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
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
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

// TestBrokenUploadsEndTheConnection: bodies net/http reads for the
// gateway (chunked, HTTP/1.0, Expect: 100-continue) that stall or break
// are answered (408, 400), and the connection then ends: what the client
// sends after a broken body is never read as its next request, and a
// stalled one does not hold the connection. Before, the gateway's
// wrapper on net/http's own request body hid the cut from net/http,
// which kept the connection: a trailer section was served to the host as
// a request (smuggling past the framing guard), and a stalled upload held
// its connection until the client left, or got an empty 200.
func TestBrokenUploadsEndTheConnection(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	cfg := testConfig(t)
	cfg.Listeners.IdleTimeout = time.Second
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/web", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	var mu sync.Mutex
	var paths []string
	startHost(t, r, "web-1", "web", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		paths = append(paths, req.URL.Path)
		mu.Unlock()
		io.Copy(io.Discard, req.Body)
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("web")) == 1 }, "host not routable")

	const h = "Host: web.test.local\r\n"
	pad := strings.Repeat("p", 5000)
	for _, tt := range []struct {
		name string
		send string
		want int
	}{
		{"stalled chunked", "POST /up HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", 408},
		{"stalled after 100-continue", "POST /up HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 10\r\n\r\nabc", 408},
		{"stalled HTTP/1.0", "POST /up HTTP/1.0\r\n" + h + "Content-Length: 10\r\n\r\nabc", 408},
		{"trailer past the bound", "POST /up HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n" +
			"POST /SMUGGLED HTTP/1.1\r\n" + h + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\nX-Pad: " + pad + "\r\n\r\n3\r\nxyz\r\n0\r\n\r\n", 400},
		{"malformed trailer", "POST /up HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nbad trailer\r\n\r\n" +
			"GET /SMUGGLED HTTP/1.1\r\n" + h + "\r\n", 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", r.g.Addrs().HTTP)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tt.send); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			for err == nil && res.StatusCode == http.StatusContinue {
				res, err = http.ReadResponse(br, nil)
			}
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.want)
			}
			// Then the connection ends, with nothing more on it (reset,
			// when the gateway closes with the client's bytes unread).
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if rest, err := io.ReadAll(br); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || len(rest) != 0 {
				t.Fatalf("after the answer: %q, %v; want the connection closed", rest, err)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range paths {
		if strings.Contains(p, "SMUGGLED") {
			t.Errorf("the host got %s, sent after a broken body (all: %q)", p, paths)
		}
	}
}
