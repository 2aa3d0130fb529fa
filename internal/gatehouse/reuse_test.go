package gatehouse

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestKeptAliveRequestsKeepTheirOwnFields: the gateway reuses a request's
// memory for a later one once the server is done with it (exchange,
// gateway.Gateway.RequestDone). Many requests on a few kept-alive
// HTTP/1.1 connections, or as streams of one HTTP/2 connection, at once,
// so that that memory moves between requests in flight, each get their
// own fields (GETs, and HEADs, whose head goes out after the handler
// returns): the id the host was sent is the one on the answer, a
// client's own id is kept, and every answer's rate-limit count is its own
// (one charge each, none seen twice; a day's window, so that no window
// turns over and weighs the counts).
func TestKeptAliveRequestsKeepTheirOwnFields(t *testing.T) {
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello",
		`{"mode":"http","rate_limit":{"requests":100000,"window":"24h"}}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	startHost(t, r, "host-1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("X-Host-Saw", req.Header.Get("X-Request-Id")+" "+req.Header.Get("X-Gatehouse-Request-Id")+" "+req.URL.Path)
		_, _ = io.WriteString(w, "ok")
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return len(r.g.Live().Load().Pool("hello")) == 1
	}, "host-1 never became routable")

	p := &parityEnv{r: r}
	h2 := p.h2()
	defer h2.CloseIdleConnections()
	tests := []struct {
		name string
		// client returns a worker's round trip: its own kept-alive
		// connection over HTTP/1.1, or streams of one shared HTTP/2 one.
		client func() (do func(method, name, own string) (*http.Response, error), done func(), err error)
	}{
		{"HTTP/1.1", func() (func(string, string, string) (*http.Response, error), func(), error) {
			nc, err := net.Dial("tcp", r.g.Addrs().HTTP)
			if err != nil {
				return nil, nil, err
			}
			_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(nc)
			return func(method, name, own string) (*http.Response, error) {
				q := parityReq{method: method, host: "hello.test.local", target: "/" + name}
				if own != "" {
					q.hdr = [][2]string{{"X-Request-Id", own}}
				}
				if _, err := io.WriteString(nc, rawReq(q)); err != nil {
					return nil, err
				}
				return http.ReadResponse(br, &http.Request{Method: method})
			}, func() { nc.Close() }, nil
		}},
		{"HTTP/2", func() (func(string, string, string) (*http.Response, error), func(), error) {
			return func(method, name, own string) (*http.Response, error) {
				req, err := http.NewRequest(method, "https://hello.test.local/"+name, nil)
				if err != nil {
					return nil, err
				}
				if own != "" {
					req.Header.Set("X-Request-Id", own)
				}
				return h2.RoundTrip(req)
			}, func() {}, nil
		}},
	}
	const conns, each = 4, 100
	ids := map[string]string{}       // X-Request-Id -> request, over both protocols
	remaining := map[string]string{} // X-Ratelimit-Remaining -> request
	var mu sync.Mutex
	for ti, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, conns)
			for c := range conns {
				wg.Go(func() {
					errs <- func() error {
						do, done, err := tt.client()
						if err != nil {
							return err
						}
						defer done()
						for i := range each {
							name := fmt.Sprintf("t%d-c%d-r%d", ti, c, i)
							own := ""
							if i%3 == 0 {
								own = "client-" + name
							}
							// Every fourth a HEAD: its head is written after the
							// handler returns, the last moment its fields are read.
							method, body := "GET", "ok"
							if i%4 == 3 {
								method, body = "HEAD", ""
							}
							res, err := do(method, name, own)
							if err != nil {
								return fmt.Errorf("%s: %v", name, err)
							}
							b, _ := io.ReadAll(res.Body)
							res.Body.Close()
							id := res.Header.Get("X-Request-Id")
							if res.StatusCode != 200 || string(b) != body {
								return fmt.Errorf("%s: %d %q", name, res.StatusCode, b)
							}
							if want := id + " " + id + " /" + name; res.Header.Get("X-Host-Saw") != want {
								return fmt.Errorf("%s: host saw %q, the answer says id %q", name, res.Header.Get("X-Host-Saw"), id)
							}
							if own != "" && id != own {
								return fmt.Errorf("%s: id %q, the client sent %q", name, id, own)
							}
							if res.Header.Get("X-Gatehouse-Cluster") == "" || res.Header.Get("X-Ratelimit-Limit") != "100000" {
								return fmt.Errorf("%s: cluster %q, limit %q", name, res.Header.Get("X-Gatehouse-Cluster"), res.Header.Get("X-Ratelimit-Limit"))
							}
							left := res.Header.Get("X-Ratelimit-Remaining")
							if n, err := strconv.Atoi(left); err != nil || n < 100000-len(tests)*conns*each || n >= 100000 {
								return fmt.Errorf("%s: remaining %q", name, left)
							}
							mu.Lock()
							prevLeft, dupLeft := remaining[left]
							prevID, dupID := ids[id]
							remaining[left], ids[id] = name, name
							mu.Unlock()
							if dupLeft || dupID {
								return fmt.Errorf("%s: remaining %q (also %q) or id %q (also %q) seen twice", name, left, prevLeft, id, prevID)
							}
						}
						return nil
					}()
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	if len(ids) != len(tests)*conns*each {
		t.Errorf("%d distinct ids for %d requests", len(ids), len(tests)*conns*each)
	}
}
