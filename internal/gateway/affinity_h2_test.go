package gateway

import (
	"bytes"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestForwardMarkNonASCIIAuthority: an HTTP/2 request whose :authority is
// a non-ASCII spelling of a name (an IDN custom domain, or a full-width
// "ａ" the route layer's IDNA mapping reads as "a") is forwarded to its
// owner with a mark the owner verifies: the owner serves it (200, not its
// 404) and its host sees the client's address, not the forwarding
// gateway's. net/http's transport would send its own punycode of such a
// Host, which is neither the name signed nor, for the full-width one, the
// name routed.
func TestForwardMarkNonASCIIAuthority(t *testing.T) {
	app := ownedBy(t, "ap", threeIDs)
	cs := startClusters(t, clusterSetup{ids: threeIDs, edit: func(c *testCluster, o *Options) {
		c.b.PutDomain(&route.Domain{Domain: "xn--bcher-kva.example", App: app, Verified: true}) // bücher.example
	}})
	for _, authority := range []string{
		"b\u00fccher.example",               // an IDN custom domain, as an HTTP/2 client may send it
		"\uff41" + app[1:] + "." + testZone, // a full-width spelling IDNA maps to the app's name
	} {
		t.Run(authority, func(t *testing.T) { sendH2Authority(t, cs, app, authority) })
	}
}

func sendH2Authority(t *testing.T, cs map[string]*testCluster, app, authority string) {
	fr := dialH2C(t, cs["eu"].gw, 15*time.Second)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", authority}, {":path", "/hello"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	status, body := readH2Answer(t, fr)
	if status != "200" || body != "served by ap" { // a direct request to the owner gets this
		t.Fatalf("GET via eu with :authority %q = %s %q, want 200 from the owner", authority, status, body)
	}
	seen := cs["ap"].host.requests()
	last := seen[len(seen)-1]
	if last.ClientIP != clientAddr {
		t.Errorf("the owner's host saw X-Gatehouse-Client-Ip %q, want the client %s (the forward mark did not verify)", last.ClientIP, clientAddr)
	}
}

// dialH2C serves gw over h2c (and HTTP/1.1) on a fresh loopback listener
// and returns a framer on a connection to it from clientAddr, the preface
// and SETTINGS sent, its reads and writes bounded by within.
func dialH2C(t *testing.T, gw http.Handler, within time.Duration) *http2.Framer {
	t.Helper()
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: asEdge(gw), Protocols: &p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(within))
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	return fr
}

// readH2Answer reads frames on fr until stream 1's answer ends, and
// returns its :status and body; a reset or GOAWAY fails t.
func readH2Answer(t *testing.T, fr *http2.Framer) (status, body string) {
	t.Helper()
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status = f.Value
		}
	})
	for done := false; !done; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read: %v (status %q body %q)", err, status, body)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			dec.Write(f.HeaderBlockFragment())
			done = f.StreamEnded()
		case *http2.DataFrame:
			body += string(f.Data())
			done = f.StreamEnded()
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			t.Fatalf("stream refused: %v", f)
		}
	}
	return status, body
}
