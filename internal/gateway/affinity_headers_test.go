package gateway

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

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
