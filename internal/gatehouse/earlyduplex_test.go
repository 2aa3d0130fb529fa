package gatehouse

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// startDuplex starts a gateway with the stall bound earlyBound and the
// lane on or off, and app web with testutil.DuplexHost its one host.
func startDuplex(t *testing.T, fast bool) *running {
	t.Helper()
	cfg := testConfig(t)
	cfg.Listeners.FastPath = fast
	cfg.Listeners.IdleTimeout = earlyBound
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/web", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	startHost(t, r, "web-1", "web", http.HandlerFunc(testutil.DuplexHost))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("web")) == 1 }, "host not routable")
	return r
}

// TestEarlyAnswerLeavesTheUploadWhole: a host that answers an upload
// while it still reads it gets all of it, byte for byte, whichever
// server took it from the client (the lane, net/http over HTTP/1.1, an
// HTTP/2 server): the gateway's proxy still sends the upload as the
// answer's head goes out, so no server of the gateway's may read what
// is left of it then and drop it, as net/http's HTTP/1 server does for
// a handler that is done with the body. Once with the client sending its
// upload at once (more than the sockets to the host hold, so that some
// is still unread as the head goes out), once with a pause in it shorter
// than the stall bound (the rest comes as the head goes out).
func TestEarlyAnswerLeavesTheUploadWhole(t *testing.T) {
	t.Parallel()
	var seed [32]byte
	big := make([]byte, earlyUpload)
	_, _ = rand.NewChaCha8(seed).Read(big)
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast_path=%v", fast), func(t *testing.T) {
			t.Parallel()
			r := startDuplex(t, fast)
			for _, client := range []string{"h1 length", "h1 chunked", "h2"} {
				for _, up := range []struct {
					name  string
					pre   int
					pause time.Duration
					parts [][]byte
				}{
					{"at once", 64 << 10, 0, [][]byte{big}},
					{"paused", 32 << 10, 3 * earlyBound / 10, [][]byte{big[:64<<10], big[64<<10 : 192<<10]}},
				} {
					t.Run(client+"/"+up.name, func(t *testing.T) {
						t.Parallel()
						h := sha256.New()
						n := 0
						for _, p := range up.parts {
							h.Write(p)
							n += len(p)
						}
						want := fmt.Sprintf("%d %x", n, h.Sum(nil))
						q := fmt.Sprintf("/hash?pre=%d", up.pre)
						var code int
						var got []byte
						var err error
						if client == "h2" {
							code, got, err = earlyH2(t, r.g.Addrs().HTTPS, q, up.pause, up.parts...)
						} else {
							code, got, err = earlyH1(t, r.g.Addrs().HTTP, q, client == "h1 chunked", up.pause, up.parts...)
						}
						if code != http.StatusOK || string(got) != want || err != nil {
							t.Errorf("the host answered early: %d %q, %v; want it to have read %q", code, got, err, want)
						}
					})
				}
			}
		})
	}
}

// TestEarlyAnswerKeepsTheConnection: a client whose upload a host
// answered before the gateway had all of it (a pause in the upload, the
// rest and the next request sent as the answer comes) gets that next
// request answered on the same connection, whichever HTTP/1 server took
// the upload: the gateway reads the rest and drops it as its handler
// returns. Left to net/http after the handler, in full duplex, the next
// request made it panic (golang/go#68560) and close the connection
// unanswered.
func TestEarlyAnswerKeepsTheConnection(t *testing.T) {
	t.Parallel()
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast_path=%v", fast), func(t *testing.T) {
			t.Parallel()
			r := startDuplex(t, fast)
			for _, chunked := range []bool{false, true} {
				t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
					t.Parallel()
					c, err := net.Dial("tcp", r.g.Addrs().HTTP)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(20 * time.Second))
					part := strings.Repeat("u", 64<<10)
					head, frame, end := fmt.Sprintf("POST /early HTTP/1.1\r\nHost: web.test.local\r\nContent-Length: %d\r\n\r\n", 2*len(part)), part, ""
					if chunked {
						head = "POST /early HTTP/1.1\r\nHost: web.test.local\r\nTransfer-Encoding: chunked\r\n\r\n"
						frame, end = fmt.Sprintf("%x\r\n%s\r\n", len(part), part), "0\r\n\r\n"
					}
					sent := make(chan error, 1)
					go func() {
						if _, err := io.WriteString(c, head+frame); err != nil {
							sent <- err
							return
						}
						time.Sleep(3 * earlyBound / 10)
						_, err := io.WriteString(c, frame+end+"GET /next HTTP/1.1\r\nHost: web.test.local\r\n\r\n")
						sent <- err
					}()
					br := bufio.NewReader(c)
					for _, want := range []string{"early", "next"} {
						res, err := http.ReadResponse(br, nil)
						if err != nil {
							t.Fatalf("no answer %q on the connection: %v", want, err)
						}
						b, err := io.ReadAll(res.Body)
						if res.StatusCode != http.StatusOK || string(b) != want || err != nil {
							t.Fatalf("%d %q, %v; want 200 %q", res.StatusCode, b, err, want)
						}
					}
					if err := <-sent; err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}
