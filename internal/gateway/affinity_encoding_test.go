package gateway

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestForwardKeepsAcceptEncoding: a request forwarded to its owner
// cluster reaches the owner's host with the Accept-Encoding the client
// sent, and none when it sent none, as a request served where it landed
// does. net/http's transport asks a peer for gzip by itself when a
// request names no encoding, and unzips the answer on the way back: the
// host was asked for an encoding no client wanted, and the client got a
// body that was no longer the one the host sent (its Content-Length and
// Content-Encoding dropped, an event stream held in the unzipper).
func TestForwardKeepsAcceptEncoding(t *testing.T) {
	clusters := map[bool]map[string]*testCluster{
		false: startClusters(t, clusterSetup{ids: threeIDs}),
		true:  startClusters(t, clusterSetup{ids: threeIDs, tls: true}),
	}
	tests := []struct {
		name string
		tls  bool // peers at https URLs (HTTP/2 between gateways); else http (HTTP/1.1)
		sent []string
	}{
		{"none to an http peer", false, nil},
		{"none over HTTP/2", true, nil},
		{"br to an http peer", false, []string{"br"}},
		{"identity over HTTP/2", true, []string{"identity"}},
		{"gzip to an http peer", false, []string{"gzip"}},
		{"gzip over HTTP/2", true, []string{"gzip"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := clusters[tt.tls]
			app := ownedBy(t, "ap", threeIDs)
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
			// DisableCompression: this client sends only the fields set below.
			tr := &http.Transport{DialContext: d.DialContext, DisableCompression: true}
			if tt.tls {
				tr.TLSClientConfig = &tls.Config{RootCAs: cs["us"].roots}
			}
			t.Cleanup(tr.CloseIdleConnections)
			cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			req, err := http.NewRequest(http.MethodGet, cs["us"].url+"/gzip", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = app + "." + testZone
			if tt.sent != nil {
				req.Header["Accept-Encoding"] = tt.sent
			}
			before := len(cs["ap"].host.requests())
			res, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			gzipped := slices.Contains(tt.sent, "gzip")
			if got := res.Header.Get("Content-Encoding"); (got == "gzip") != gzipped {
				t.Fatalf("GET via us: Content-Encoding %q; want gzip only when the client asked for it (sent %q)", got, tt.sent)
			}
			if gzipped {
				// The host's gzip, as it sent it: not unzipped on the way.
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatalf("GET via us: a gzip body that is not gzip: %v", err)
				}
				body, _ = io.ReadAll(zr)
			}
			if res.StatusCode != http.StatusOK || string(body) != "served by ap" {
				t.Fatalf("GET via us = %d %q, want 200 served by ap", res.StatusCode, body)
			}
			seen := cs["ap"].host.requests()[before:]
			if len(seen) != 1 {
				t.Fatalf("ap's host got %d requests, want 1", len(seen))
			}
			if got := seen[0].AcceptEncoding; !slices.Equal(got, tt.sent) {
				t.Errorf("ap's host got Accept-Encoding %q, want %q as the client sent", got, tt.sent)
			}
		})
	}
}
