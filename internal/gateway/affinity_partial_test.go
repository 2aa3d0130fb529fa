package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// cutOwner is a stand-in for an owner gateway that takes a request's head
// and the first bytes of its body, then drops the connection: the request
// may have reached the owner's host in part. It counts the connections.
type cutOwner struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns int
}

func startCutOwner(t *testing.T) *cutOwner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &cutOwner{ln: ln}
	o.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			o.conns++
			o.mu.Unlock()
			o.wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				// The body's first bytes, if any come, then gone.
				c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				io.ReadFull(br, make([]byte, 3))
			})
		}
	})
	t.Cleanup(func() { ln.Close(); o.wg.Wait() })
	return o
}

func (o *cutOwner) url() string { return "http://" + o.ln.Addr().String() }

func (o *cutOwner) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.conns
}

// TestOwnerCutMidBody: a request whose body was partly sent to the owner
// cluster when the connection dropped may have reached a host there, so
// it is never served a second time (DESIGN §5.2): a write, streamed or
// kept whole, and a GET with a body (not replayable either) get 502 and
// no host here sees them, while a GET without a body, which may be
// resent, is served here.
func TestOwnerCutMidBody(t *testing.T) {
	owner := startCutOwner(t)
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: 5 * time.Second, edit: func(c *testCluster, o *Options) {
		if c.id == "ap" {
			members := o.Cluster.Members
			o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", owner.url()) }
		}
	}})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	tests := []struct {
		name   string
		method string
		body   string
		chunk  bool // sent without a Content-Length: streamed to the owner
		want   int
		local  bool // served by ap's host
	}{
		{"POST streamed", http.MethodPost, strings.Repeat("x", 40000), true, http.StatusBadGateway, false},
		{"PUT kept whole", http.MethodPut, strings.Repeat("x", 600), false, http.StatusBadGateway, false},
		{"GET with a body", http.MethodGet, "hello", false, http.StatusBadGateway, false},
		{"DELETE with a body", http.MethodDelete, "hello", false, http.StatusBadGateway, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, conns := len(cs["ap"].host.requests()), owner.count()
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunk {
				body = io.MultiReader(body) // unknown length: chunked
			}
			req, err := http.NewRequest(tt.method, cs["ap"].url+"/cut", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = app + "." + testZone
			res, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.want || res.Header.Get(cluster.HeaderCluster) != "ap" || res.Header.Get(cluster.HeaderFailover) != "" {
				t.Fatalf("= %d %q (cluster %q, failover %q), want %d from ap", res.StatusCode, b, res.Header.Get(cluster.HeaderCluster), res.Header.Get(cluster.HeaderFailover), tt.want)
			}
			if owner.count() == conns {
				t.Fatal("the owner was never asked")
			}
			if got := len(cs["ap"].host.requests()) - before; got != 0 {
				t.Fatalf("ap's host saw %d requests: a request part-sent to the owner was served again", got)
			}
		})
	}
	// A GET without a body may go to a second cluster: served here.
	res, body := send(t, cl, cs["ap"], http.MethodGet, app, "/cut", nil)
	if res.StatusCode != http.StatusOK || body != "served by ap" {
		t.Fatalf("GET without a body = %d %q, want served by ap", res.StatusCode, body)
	}
	for _, c := range cs {
		for _, r := range c.host.requests() {
			if r.Method != http.MethodGet || r.Body != 0 {
				t.Errorf("host of %s saw %+v", c.id, r)
			}
		}
	}
}
