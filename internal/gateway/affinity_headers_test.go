package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestForwardedCORSHeadersOnce: a cross-origin request that lands on a
// gateway which forwards it gets the CORS fields of the app once, exactly
// as when it lands on the owner: the owner's gateway already applied the
// app's allow-list, and the forwarding gateway applying it again must not
// list Origin twice in Vary nor the exposed fields twice.
func TestForwardedCORSHeadersOnce(t *testing.T) {
	const origin = "https://site.example"
	cs := startClusters(t, clusterSetup{ids: threeIDs, edit: func(c *testCluster, o *Options) {
		tbl := o.Live.Load()
		for _, a := range clApps {
			app := *tbl.App(a)
			app.CORS = route.CORS{Origins: []string{origin}}
			c.b.PutApp(&app)
		}
	}})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)
	hdr := http.Header{"Origin": {origin}}
	direct, _ := send(t, cl, cs["ap"], http.MethodGet, app, "/", hdr)
	for _, via := range []string{"eu", "us"} {
		res, body := send(t, cl, cs[via], http.MethodGet, app, "/", hdr)
		if res.StatusCode != http.StatusOK || body != "served by ap" {
			t.Fatalf("GET via %s = %d %q, want 200 served by ap", via, res.StatusCode, body)
		}
		for _, k := range []string{"Access-Control-Allow-Origin", "Vary", "Access-Control-Expose-Headers"} {
			if got, want := res.Header.Values(k), direct.Header.Values(k); !slices.Equal(got, want) {
				t.Errorf("GET via %s: %s = %q, want %q as from the owner directly", via, k, got, want)
			}
		}
	}
}

// TestForwardKeepsClientProto: a client on HTTPS whose request is
// forwarded to the owner cluster over the peers' plain-http URL is still
// an HTTPS client to the owner's host (X-Forwarded-Proto: https), as it is
// to a host of the cluster it reached: the proto names the client's
// request, not the hop between gateways. An app that redirects http to
// https by that field would otherwise send every such client round again,
// for ever. The same over HTTP/1.1 and HTTP/2.
func TestForwardKeepsClientProto(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	cert, pool := testutil.SelfSigned(t, "*."+testZone)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: cs["us"].gw, ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close(); <-done })
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
			dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, ln.Addr().String()) // every app name resolves to us's gateway
			}
			tr := &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: proto == "HTTP/2.0"}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for _, owner := range []string{"us", "ap"} {
				app := ownedBy(t, owner, threeIDs)
				res, err := cl.Get("https://" + app + "." + testZone + "/")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || string(b) != "served by "+owner || res.Proto != proto {
					t.Fatalf("GET %s via us = %s %d %q, want %s 200 served by %s", app, res.Proto, res.StatusCode, b, proto, owner)
				}
				seen := cs[owner].host.requests()
				if last := seen[len(seen)-1]; last.Proto != "https" {
					t.Errorf("an HTTPS client's request served by %s: its host saw X-Forwarded-Proto %q, want https", owner, last.Proto)
				}
			}
		})
	}
}

// TestForwardUpgrade: a request that upgrades its connection to another
// protocol (WebSocket, or any other a host speaks after a 101) reaches
// the owner's host through a gateway that forwards it, and a peer's host
// through failover, whether the gateways reach each other over plain
// HTTP/1.1 or over TLS, where the forwards are HTTP/2, which cannot carry
// an upgrade.
func TestForwardUpgrade(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) {
			cs := startClusters(t, clusterSetup{ids: threeIDs, tls: overTLS})
			app := ownedBy(t, "ap", threeIDs)
			for _, proto := range []string{"websocket", "echo/1"} {
				got, hdr := upgradeVia(t, cs["us"], app, proto)
				if want := proto + " by ap"; got != want || hdr.Get(cluster.HeaderCluster) != "ap" {
					t.Errorf("%s upgrade via us: %q from cluster %q, want %q from ap, the owner", proto, got, hdr.Get(cluster.HeaderCluster), want)
				}
			}
			// An upgrade by POST: its 101 carries no Content-Length
			// (RFC 9110 §8.6) through either gateway, which net/http
			// adds to an answer to a POST unless told otherwise.
			got, hdr := upgradeMethodVia(t, cs["us"], app, "echo/1", http.MethodPost)
			if _, ok := hdr["Content-Length"]; got != "echo/1 by ap" || ok {
				t.Errorf("POST upgrade via us: %q, 101 header %v; want echo/1 by ap, no Content-Length", got, hdr)
			}
			cs["ap"].host.kill()
			for _, proto := range []string{"websocket", "echo/1"} {
				got, hdr := upgradeVia(t, cs["ap"], app, proto)
				if want := proto + " by eu"; got != want || hdr.Get(cluster.HeaderFailover) != "eu" {
					t.Errorf("%s upgrade at ap, its host gone: %q (failover %q), want %q failed over to eu", proto, got, hdr.Get(cluster.HeaderFailover), want)
				}
			}
		})
	}
}

// upgradeVia asks c's gateway, from the client address, to upgrade a
// GET /upgrade for app to proto, and returns the line read after the 101
// ("" if none) and the 101's header.
func upgradeVia(t *testing.T, c *testCluster, app, proto string) (string, http.Header) {
	t.Helper()
	return upgradeMethodVia(t, c, app, proto, http.MethodGet)
}

// upgradeMethodVia is upgradeVia with the request's method.
func upgradeMethodVia(t *testing.T, c *testCluster, app, proto, method string) (string, http.Header) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", c.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if c.roots != nil {
		tc := tls.Client(conn, &tls.Config{RootCAs: c.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
		defer tc.Close()
		conn = tc
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	fmt.Fprintf(conn, "%s /upgrade HTTP/1.1\r\nHost: %s.%s\r\nConnection: Upgrade\r\nUpgrade: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n\r\n", method, app, testZone, proto, key)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s upgrade via %s: %v", proto, c.id, err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(res.Body)
		t.Logf("%s upgrade via %s: %d %s", proto, c.id, res.StatusCode, b)
		return "", res.Header
	}
	line, _ := br.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), res.Header
}

// TestForwardedRateFieldsAfterInterim: an upload with Expect:
// 100-continue forwarded to the owner gets a 100 from the owner before
// its answer; the answer's rate-limit fields are the owner's, one value
// each, as for a request without the 100: this gateway's own, which it
// puts back on a final answer after a 1xx, give way to the peer's.
func TestForwardedRateFieldsAfterInterim(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)
	for _, expect := range []bool{false, true} {
		hdr := http.Header{}
		if expect {
			hdr.Set("Expect", "100-continue")
		}
		res, body := send(t, cl, cs["eu"], http.MethodPost, app, "/", hdr)
		if res.StatusCode != http.StatusOK || body != "served by ap" {
			t.Fatalf("POST via eu (Expect %v) = %d %q, want 200 served by ap", expect, res.StatusCode, body)
		}
		for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"} {
			if v := res.Header[k]; len(v) != 1 {
				t.Errorf("Expect %v: %s = %q, want the owner's one value", expect, k, v)
			}
		}
	}
}
