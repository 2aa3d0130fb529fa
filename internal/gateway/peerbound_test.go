package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// TestPeerAnswerBounds: a forward to a peer gateway keeps the bounds a
// host's answer has (DESIGN §2 step 10): at most five 1xx, and a head of
// at most 1 MiB. A peer past either has not answered: the owner's GET is
// served here, as when the owner fails. Before, the peer's 1xx went on
// until the cluster deadline (504) and its 2 MiB head reached the client
// (net/http's own bound is 10 MB).
func TestPeerAnswerBounds(t *testing.T) {
	t.Parallel()
	const hints = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	stop := make(chan struct{})
	peer := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/big" {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("b", 2<<20)+"\r\nContent-Length: 7\r\n\r\nby peer")
			return
		}
		for i := 0; i < 1000; i++ { // 10 s at most
			if _, err := io.WriteString(c, hints); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { close(stop) }) // before rawHost waits for its connections
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: 5 * time.Second, edit: func(c *testCluster, o *Options) {
		if c.id != "eu" {
			return
		}
		members := o.Cluster.Members
		o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", "http://"+peer) }
	}})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	for _, path := range []string{"/big", "/hints"} {
		req, err := http.NewRequest(http.MethodGet, cs["eu"].url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = app + "." + testZone
		n1xx := 0
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(int, textproto.MIMEHeader) error { n1xx++; return nil },
		}))
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body := readBody(t, res)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || body != "served by eu" || res.Header.Get("X-Big") != "" || n1xx > 5 {
			t.Errorf("%s: %d %q after %d 1xx; want served by eu after at most 5", path, res.StatusCode, body, n1xx)
		}
	}
}

// TestPeerStatusOutOfRange: a peer's status code outside 100-599 is no
// HTTP answer (RFC 9110 §15), as a host's is not (DESIGN §2 step 10):
// the owner's GET is served here, as when the owner fails, and a POST,
// which may have reached it, gets 502. Before, a GET's 099 failed
// writing (500) and a POST's 999 reached the client as the peer sent it.
func TestPeerStatusOutOfRange(t *testing.T) {
	t.Parallel()
	peer := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, "HTTP/1.1 "+strings.TrimPrefix(req.URL.Path, "/")+" Odd\r\nContent-Length: 7\r\n\r\nby peer")
	})
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: 5 * time.Second, edit: func(c *testCluster, o *Options) {
		if c.id != "eu" {
			return
		}
		members := o.Cluster.Members
		o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", "http://"+peer) }
	}})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	tests := []struct {
		method, status string
		want           int
		body           string
	}{
		{http.MethodGet, "099", http.StatusOK, "served by eu"},
		{http.MethodGet, "999", http.StatusOK, "served by eu"},
		{http.MethodPost, "099", http.StatusBadGateway, ""},
		{http.MethodPost, "600", http.StatusBadGateway, ""},
		{http.MethodPost, "999", http.StatusBadGateway, ""},
	}
	for _, tt := range tests {
		var body io.Reader
		if tt.method == http.MethodPost {
			body = strings.NewReader("upload")
		}
		req, err := http.NewRequest(tt.method, cs["eu"].url+"/"+tt.status, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = app + "." + testZone
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.status, err)
		}
		b := readBody(t, res)
		res.Body.Close()
		if res.StatusCode != tt.want || (tt.body != "" && b != tt.body) || strings.Contains(b, "by peer") {
			t.Errorf("%s, peer answers %s: %d %q; want %d %q", tt.method, tt.status, res.StatusCode, b, tt.want, tt.body)
		}
	}
}
