package gateway

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestRequestTrailersWithLength: over HTTP/2 a request may carry both a
// content-length and trailer fields (an upload's checksum). They reach
// the app's host, an HTTP/1.1 server, wherever the upload lands: over
// HTTP/1.1 only a chunked body carries trailers, so a hop that kept the
// length (to the host, or to an http peer gateway) dropped them.
func TestRequestTrailersWithLength(t *testing.T) {
	tests := []struct {
		name string
		tls  bool // h2 over TLS, peers at https URLs; else h2c, peers at http URLs
		via  string
		size int
	}{
		{"owner over TLS", true, "ap", 10},
		{"owner over h2c", false, "ap", 10},
		{"streamed forward to an http peer", false, "us", 20000},
		{"streamed forward over TLS", true, "us", 20000},
		// A write of at most 16 KiB is read whole before its forward
		// (DESIGN §5.2): that read must reach the body's end, where the
		// server fills the trailers in.
		{"small write forwarded over TLS", true, "us", 10},
		{"small write forwarded to an http peer", false, "us", 10},
	}
	clusters := map[bool]map[string]*testCluster{
		true:  startClusters(t, clusterSetup{ids: threeIDs, tls: true}),
		false: startClusters(t, clusterSetup{ids: threeIDs}),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { sendWithTrailer(t, clusters[tt.tls], tt.tls, tt.via, tt.size) })
	}
}

// sendWithTrailer POSTs size bytes with Content-Length and an X-Checksum
// trailer over HTTP/2 through via's gateway, for an app ap owns, and
// checks ap's host got both.
func sendWithTrailer(t *testing.T, cs map[string]*testCluster, overTLS bool, via string, size int) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, ForceAttemptHTTP2: true}
	url := cs[via].url
	if overTLS {
		tr.TLSClientConfig = &tls.Config{RootCAs: cs[via].roots}
	} else {
		// An h2c listener in front of via's gateway: the test gateways
		// serve HTTP/1.1 only in plaintext.
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: cs[via].gw, Protocols: &p, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		url = "http://" + ln.Addr().String()
		tr.Protocols = &p
	}
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	app := ownedBy(t, "ap", threeIDs)
	req, err := http.NewRequest(http.MethodPost, url+"/upload", io.NopCloser(strings.NewReader(strings.Repeat("x", size))))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = app + "." + testZone
	req.ContentLength = int64(size)
	req.Trailer = http.Header{"X-Checksum": {"c0ffee"}}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("POST via %s: %v", via, err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 2 {
		t.Fatalf("POST via %s went over %s, want HTTP/2", via, res.Proto)
	}
	if res.StatusCode != http.StatusOK || string(b) != "served by ap" {
		t.Fatalf("POST via %s = %d %q, want 200 served by ap", via, res.StatusCode, b)
	}
	seen := cs["ap"].host.requests()
	if last := seen[len(seen)-1]; last.Body != int64(size) || last.Checksum != "c0ffee" {
		t.Errorf("POST via %s: the owner's host read %d bytes and trailer X-Checksum %q, want %d and %q", via, last.Body, last.Checksum, size, "c0ffee")
	}
}

// TestSmallWriteHeldOpenIsForwarded: an HTTP/2 client may send all of its
// content-length and hold the stream open until it has an answer. A
// non-owner that read such a small write on to the stream's end (to take
// trailers) would wait for an end that comes only after the answer; with
// no trailers declared it must forward at the length. (Go's client checks
// for the end before it sends the last bytes, so frames by hand.)
func TestSmallWriteHeldOpenIsForwarded(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	fr := dialH2C(t, cs["us"].gw, 10*time.Second)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	app := ownedBy(t, "ap", threeIDs) + "." + testZone
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", app}, {":path", "/upload"}, {"content-length", "10"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, false, []byte("0123456789")) // and no END_STREAM until the answer
	// A read timeout here: no answer to a small write held open.
	status, body := readH2Answer(t, fr)
	if status != "200" || body != "served by ap" {
		t.Fatalf("POST via us = %s %q, want 200 served by ap", status, body)
	}
}
