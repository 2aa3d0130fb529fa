package gatehouse

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// earlyBound is listeners.idle_timeout in these tests, the least the
// config takes.
const earlyBound = time.Second

// earlyUpload is more than the sockets between the gateway and a host
// that reads none of it hold (about 4 MiB of send buffer on loopback), so
// that the gateway still has some of it to read when the host answers.
const earlyUpload = 16 << 20

var earlyAnswer = strings.Repeat("a", 64<<10)

// earlyHost answers at once without reading the upload, or after
// head= of a pause, and sends its answer's body after answer= of
// another, in two halves: with a Content-Length, or chunked= without.
// Full duplex, so that its own server sends the head as written rather
// than first reading what is left of the upload.
func earlyHost(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	head, _ := time.ParseDuration(q.Get("head"))
	answer, _ := time.ParseDuration(q.Get("answer"))
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	time.Sleep(head)
	if q.Get("chunked") == "" {
		w.Header().Set("Content-Length", strconv.Itoa(len(earlyAnswer)))
	}
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	time.Sleep(answer)
	io.WriteString(w, earlyAnswer[:len(earlyAnswer)/2])
	_ = rc.Flush()
	time.Sleep(earlyBound / 2)
	io.WriteString(w, earlyAnswer[len(earlyAnswer)/2:])
}

// TestEarlyAnswerToAPausedUploadIsWhole: a host that answers an upload
// without taking all of it, after a pause longer than the stall bound
// before its head, between its head and its body, or both, has its
// answer reach the client whole, whichever server took the upload: the
// lane (HTTP/1.1 with a Content-Length), net/http (chunked, which the
// lane hands over) or HTTP/2. The client sent its upload at once: that
// the gateway stopped reading it, held up by the host, is no stall of
// the client's. net/http reads what is left of an HTTP/1 upload as the
// answer's head goes out (all of a chunked one's, up to 256 KiB), and
// the head of an answer of known length goes out with its first bytes;
// under the deadline the last read of the body armed, long passed, that
// read failed, the request was cancelled and the answer cut after its
// head.
func TestEarlyAnswerToAPausedUploadIsWhole(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Listeners.IdleTimeout = earlyBound
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/web", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	startHost(t, r, "web-1", "web", http.HandlerFunc(earlyHost))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("web")) == 1 }, "host not routable")
	// Past the bound: the deadline a read armed is at most that far.
	const pause = 6 * earlyBound / 5
	for _, client := range []string{"h1 length", "h1 chunked", "h2"} {
		for _, p := range []struct {
			name         string
			head, answer time.Duration
			chunked      bool
		}{
			// An answer of unknown length: its head goes out as it
			// comes.
			{"before the head", pause, 0, true},
			// Of known length: with its first bytes.
			{"after the head", 0, pause, false},
			{"before and after the head", pause, pause, false},
		} {
			t.Run(client+"/"+p.name, func(t *testing.T) {
				t.Parallel()
				q := fmt.Sprintf("/up?head=%s&answer=%s", p.head, p.answer)
				if p.chunked {
					q += "&chunked=1"
				}
				var code int
				var got []byte
				var err error
				if client == "h2" {
					code, got, err = earlyH2(t, r.g.Addrs().HTTPS, q, 0, earlyUploadBytes())
				} else {
					code, got, err = earlyH1(t, r.g.Addrs().HTTP, q, client == "h1 chunked", 0, earlyUploadBytes())
				}
				if code != http.StatusOK || string(got) != earlyAnswer || err != nil {
					t.Errorf("an answer to an upload the host paused (%s before its head, %s after): %d, %d of %d bytes, %v",
						p.head, p.answer, code, len(got), len(earlyAnswer), err)
				}
			})
		}
	}
}

// earlyUploadBytes is earlyUpload's bytes, shared by the tests that
// send it.
var earlyUploadBytes = sync.OnceValue(func() []byte { return bytes.Repeat([]byte("u"), earlyUpload) })

// earlyH1 sends parts to path over HTTP/1.1, with pause between them and
// each as fast as the gateway takes it, and returns the answer.
func earlyH1(t *testing.T, addr, path string, chunked bool, pause time.Duration, parts ...[]byte) (int, []byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	sent := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-sent })
	go func() {
		defer close(sent)
		head := "POST " + path + " HTTP/1.1\r\nHost: web.test.local\r\nTransfer-Encoding: chunked\r\n\r\n"
		if !chunked {
			n := 0
			for _, p := range parts {
				n += len(p)
			}
			head = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: web.test.local\r\nContent-Length: %d\r\n\r\n", path, n)
		}
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		for i, p := range parts {
			if i > 0 {
				time.Sleep(pause)
			}
			for len(p) > 0 {
				piece := p[:min(len(p), 64<<10)]
				p = p[len(piece):]
				if chunked {
					if _, err := fmt.Fprintf(c, "%x\r\n", len(piece)); err != nil {
						return
					}
				}
				if _, err := c.Write(piece); err != nil {
					return
				}
				if chunked {
					if _, err := io.WriteString(c, "\r\n"); err != nil {
						return
					}
				}
			}
		}
		if chunked {
			_, _ = io.WriteString(c, "0\r\n\r\n")
		}
	}()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// pausedReader reads its parts with pause between them.
type pausedReader struct {
	parts [][]byte
	pause time.Duration
}

func (r *pausedReader) Read(p []byte) (int, error) {
	for len(r.parts) > 0 && len(r.parts[0]) == 0 {
		r.parts = r.parts[1:]
		time.Sleep(r.pause)
	}
	if len(r.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	r.parts[0] = r.parts[0][n:]
	return n, nil
}

// earlyH2 is earlyH1 over HTTP/2 on the https listener, the upload's
// length declared.
func earlyH2(t *testing.T, addr, path string, pause time.Duration, parts ...[]byte) (int, []byte, error) {
	tr := &http.Transport{DisableCompression: true, Protocols: new(http.Protocols),
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := tls.Dialer{Config: &tls.Config{ServerName: "web.test.local", InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
			return d.DialContext(ctx, "tcp", addr)
		}}
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "https://web.test.local"+path, &pausedReader{parts: parts, pause: pause})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(n)
	res, err := tr.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	if res.ProtoMajor != 2 {
		return res.StatusCode, nil, fmt.Errorf("answered over %s", res.Proto)
	}
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}
