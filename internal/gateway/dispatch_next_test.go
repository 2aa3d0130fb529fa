package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestDispatchTriesEveryHostBeforeGivingUp: hosts that refuse the
// connection (dead, not yet out of the table) do not cost a request its
// answer while a verified host of the app is up: each refused host is
// skipped for the next, a write included (nothing reached the refusing
// ones), as nginx's proxy_next_upstream does. The live host gets each
// request once.
func TestDispatchTriesEveryHostBeforeGivingUp(t *testing.T) {
	for _, tc := range []struct {
		method string
		body   string
		dead   int
	}{
		{"GET", "", 1},
		{"GET", "", 2},
		{"POST", "x", 2},
	} {
		t.Run(fmt.Sprintf("%s with %d dead", tc.method, tc.dead), func(t *testing.T) {
			e := newEnv(t, nil)
			// The dead hosts come first in the pool's order (by id), so the
			// first request meets each of them before the live one.
			for i := range tc.dead {
				e.addHost("a-dead"+string(rune('0'+i)), "hello", "http", deadURL(t))
			}
			var got atomic.Int32
			e.backend("z-live", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if string(b) != tc.body {
					t.Errorf("live host got body %q, want %q", b, tc.body)
				}
				got.Add(1)
			}))
			const n = 6
			for i := range n {
				res := e.do(tc.method, "hello.apps.test", "/", nil, strings.NewReader(tc.body))
				if res.StatusCode != http.StatusOK {
					t.Fatalf("request %d with %d dead hosts and one live: %d %s", i, tc.dead, res.StatusCode, readBody(t, res))
				}
				res.Body.Close()
			}
			if got.Load() != n {
				t.Fatalf("the live host got %d requests, want %d", got.Load(), n)
			}
		})
	}
}

// TestDispatchNextHostWithinTheConnectBudget: moving on to the next host
// is for hosts that refuse at once. A host whose connect times out
// (powered off, its packets dropped) has spent the request's connect
// budget: no further host is dialed, so a pool of such hosts costs a
// request one connect timeout, not one per host tried, and failover to
// peers keeps the rest of the cluster deadline.
//
// What is counted is the hosts dialed (each one given up on is logged),
// not the time the answer took: on a busy machine the request alone can
// take longer than a connect timeout.
func TestDispatchNextHostWithinTheConnectBudget(t *testing.T) {
	const dial = 400 * time.Millisecond
	e := newEnv(t, func(o *Options) { o.Proxy.DialTimeout = dial })
	for i := range 3 {
		e.addHost("a-hole"+string(rune('0'+i)), "hello", "http", blackHoleURL(t))
	}
	res := e.get("hello.apps.test", "/")
	wantProblem(t, res, http.StatusBadGateway) // unreachable, as a refused host is
	var dialed []string
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		var line struct {
			Msg   string `json:"msg"`
			Host  string `json:"host_id"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if line.Msg != "proxy: host unreachable" {
			continue
		}
		if !strings.Contains(line.Error, "i/o timeout") {
			t.Fatalf("host %s was given up on for %q, want its connect timing out", line.Host, line.Error)
		}
		dialed = append(dialed, line.Host)
	}
	if len(dialed) != 1 {
		t.Fatalf("three hosts whose connects time out: %v dialed, want one (one connect timeout); log:\n%s", dialed, e.logs.String())
	}
}

// blackHoleURL is a loopback address whose connects hang: a listener
// that never accepts, its one-connection backlog filled, so the kernel
// drops every further SYN.
func blackHoleURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 4 { // fill the backlog; the first connect that hangs says it is full
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return "http://" + addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("this kernel does not drop connects to a full backlog")
	return ""
}
