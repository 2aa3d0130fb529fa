package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// TestObsFoldReachesTheHostUnfolded: a field value continued on a line
// that begins with a space or a tab (obs-fold) reaches the host with each
// fold replaced by one space, which RFC 9112 §5.2 allows a server in
// place of a 400, on every path: the lane hands such a head to net/http,
// which joins the lines before any layer reads the value, and both the
// fast path (GET) and ReverseProxy (POST) write the joined value. The
// host never sees a line beginning with white space, which a parser of
// its own could read as a new field, or as the fold's continuation of
// another field than the one the gateway checked. A fold of the first
// field line, which continues no field, is refused, and a fold of
// Content-Length or Transfer-Encoding is the guard's (guard_test.go).
func TestObsFoldReachesTheHostUnfolded(t *testing.T) {
	heads := make(chan string, 8)
	addr := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var head strings.Builder
		length := 0
		for {
			line, err := br.ReadString('\n')
			head.WriteString(line)
			if err != nil || line == "\r\n" {
				break
			}
			if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
				length, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		_, _ = io.CopyN(io.Discard, br, int64(length))
		heads <- head.String()
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	e := newEnv(t, nil)
	e.addHost("h1", "hello", "http", "http://"+addr)
	httpAddr, httpsAddr := e.serve(false)
	const fields = "X-Folded: a \r\n  b\r\n\tc\r\nX-After: 1\r\n"
	for _, tlsOn := range []bool{false, true} {
		addr := httpAddr
		if tlsOn {
			addr = httpsAddr
		}
		for _, raw := range []string{
			"GET /f HTTP/1.1\r\nHost: hello." + testZone + "\r\n" + fields + "\r\n",
			"POST /f HTTP/1.1\r\nHost: hello." + testZone + "\r\n" + fields + "Content-Length: 2\r\n\r\nup",
		} {
			what := fmt.Sprintf("%.4s (tls %v)", raw, tlsOn)
			if a := h1Answer(t, addr, tlsOn, raw); a.status != http.StatusOK || a.body != "ok" {
				t.Fatalf("%s: %d %q, want the host's answer", what, a.status, a.body)
			}
			var head string
			select {
			case head = <-heads:
			default:
				t.Fatalf("%s: answered, but the host saw no request", what)
			}
			if !strings.Contains(head, "\r\nX-Folded: a b c\r\n") || !strings.Contains(head, "\r\nX-After: 1\r\n") {
				t.Errorf("%s: the host got %q, want X-Folded: a b c and X-After: 1", what, head)
			}
			if strings.Contains(head, "\n ") || strings.Contains(head, "\n\t") {
				t.Errorf("%s: a folded line reached the host: %q", what, head)
			}
		}
		a := h1Answer(t, addr, tlsOn, "GET /f HTTP/1.1\r\n X-Lead: 1\r\nHost: hello."+testZone+"\r\n\r\n")
		if a.status != http.StatusBadRequest || a.header.Get("Content-Type") != problem.ContentType {
			t.Errorf("a fold of the first field line (tls %v): %d %q, want a 400 problem", tlsOn, a.status, a.body)
		}
	}
	select {
	case h := <-heads:
		t.Fatalf("the host saw a refused request: %q", h)
	default:
	}
}
