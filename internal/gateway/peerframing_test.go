package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// framingPeer is a peer gateway that writes exact bytes over HTTP/1.1
// (over TLS when conf is set, offering no HTTP/2): a request for
// /bad/{kind} gets bads[kind] (a "\x00close" suffix closes the connection
// after it), counted in bad, and every later request on its connection
// "stale", counted in stale; any other request "by peer".
type framingPeer struct {
	addr  string
	bads  map[string]string
	bad   atomic.Int32
	stale atomic.Int32
}

func newFramingPeer(t *testing.T, bads map[string]string, conf *tls.Config) *framingPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &framingPeer{addr: ln.Addr().String(), bads: bads}
	if conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	testutil.ServeConns(t, ln, p.serve)
	return p
}

func (p *framingPeer) serve(c net.Conn) {
	br := bufio.NewReader(c)
	spoilt := false
	for {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nby peer"
		closeAfter := false
		if kind, ok := strings.CutPrefix(req.URL.Path, "/bad/"); ok {
			resp, closeAfter = strings.CutSuffix(p.bads[kind], "\x00close")
			spoilt = true
			p.bad.Add(1)
		} else if spoilt {
			p.stale.Add(1)
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
		}
		if _, err := io.WriteString(c, resp); err != nil || closeAfter {
			return
		}
	}
}

// TestPeerResponseFraming: a peer gateway's HTTP/1.1 answer to a forward
// with both Content-Length and Transfer-Encoding is no answer, as a
// host's is not (DESIGN §2 step 10; RFC 9112 §6.3): the owner's GET is
// served here, as when the owner fails, and a POST, which may have
// reached it, gets 502. The connection it came on is not used again:
// the next forward goes on a new one; nor is the request sent again. Over http, and over https from a
// peer that offers no HTTP/2. Before, the answer was read as chunked
// (200 "hello") and the connection reused. Its neighbours, which
// net/http's client refuses itself, are no answer either: differing or
// invalid lengths, a coding other than chunked; nor is a field name with
// a space before its colon, which a peer's server (net/http's) never
// writes, and which framed nothing: the body was read until the close.
func TestPeerResponseFraming(t *testing.T) {
	t.Parallel()
	bads := map[string]string{
		"chunked": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"204":     "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
		"lengths": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"signed":  "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
		"gzip":    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello",
		"spaced":  "HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\nhello\x00close",
	}
	cert, roots := testutil.SelfSigned(t, "127.0.0.1")
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			var conf *tls.Config
			if scheme == "https" {
				conf = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
			}
			peer := newFramingPeer(t, bads, conf)
			cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: 5 * time.Second, edit: func(c *testCluster, o *Options) {
				if c.id != "eu" {
					return
				}
				members := o.Cluster.Members
				o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", scheme+"://"+peer.addr) }
				pt := newPeerTransport(&tls.Config{RootCAs: roots})
				t.Cleanup(pt.closeAll)
				o.Cluster.Transport = pt
			}})
			cl := clClient(t)
			app := ownedBy(t, "us", threeIDs)
			type want struct {
				status int
				body   string // "": not the peer's
			}
			refused := map[string]want{http.MethodGet: {http.StatusOK, "served by eu"}, http.MethodPost: {http.StatusBadGateway, ""}}
			tests := []struct {
				kind string
				want map[string]want
			}{
				{"chunked", refused},
				{"204", refused},
				{"lengths", refused},
				{"signed", refused},
				{"gzip", refused},
				{"spaced", refused},
			}
			sent := int32(0)
			for _, tt := range tests {
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					w := tt.want[method]
					res, body := send(t, cl, cs["eu"], method, app, "/bad/"+tt.kind, nil)
					if sent++; peer.bad.Load() != sent {
						t.Errorf("%s, peer answers %s: the peer got %d such requests for %d sent", method, tt.kind, peer.bad.Load(), sent)
						sent = peer.bad.Load()
					}
					if res.StatusCode != w.status || (w.body != "" && body != w.body) || (w.body == "" && strings.Contains(body, "hello")) ||
						res.Header.Get("Content-Length ") != "" {
						t.Errorf("%s, peer answers %s: %d %q; want %d %q", method, tt.kind, res.StatusCode, body, w.status, w.body)
					}
					res, body = send(t, cl, cs["eu"], http.MethodGet, app, "/next", nil)
					if res.StatusCode != http.StatusOK || body != "by peer" || peer.stale.Load() != 0 {
						t.Errorf("%s, peer answered %s: the next forward got %d %q (%d on the spoilt connection); want by peer, on a new one",
							method, tt.kind, res.StatusCode, body, peer.stale.Load())
					}
				}
			}
		})
	}
}

// TestPeerTransportProtocols: the peer transport, which makes its own TLS
// handshakes for its HTTP/1.1 connections to read their heads, still
// speaks HTTP/2 to a peer that offers it, and HTTP/1.1 for an upgrade.
func TestPeerTransportProtocols(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	pt := newPeerTransport(&tls.Config{RootCAs: roots})
	t.Cleanup(pt.closeAll)
	for _, tt := range []struct {
		upgrade bool
		want    string
	}{{false, "HTTP/2.0"}, {true, "HTTP/1.1"}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if tt.upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		res, err := pt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != tt.want || res.Proto != tt.want {
			t.Errorf("upgrade %v: the peer saw %q, the answer came over %s; want %s", tt.upgrade, b, res.Proto, tt.want)
		}
	}
}
