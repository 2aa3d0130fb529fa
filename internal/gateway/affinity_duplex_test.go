package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// headWait is how long a duplex client waits for the answer's head
// before it sends the rest of its upload anyway.
const headWait = 5 * time.Second

// TestForwardLeavesTheUploadWhole: an HTTP/1.1 upload to a gateway that
// forwards it to the app's owner cluster (over HTTP/1.1, or HTTP/2 between
// https gateways) reaches the owner's host whole, byte for byte, when the
// host answers before it has all of it; the answer's head reaches the
// client at once, as through the owner's own gateway; and the client's
// connection then carries its next request (or is closed after an answer
// that said so). The client sends the rest of its upload once the head is
// in (or after headWait). The forward (ReverseProxy) sends the upload on
// as the owner's answer comes; net/http's HTTP/1 server, unless its
// handler asked for full duplex, reads what is left of the body as the
// answer's head goes out and drops it (up to 256 KiB + 1): a chunked
// upload reached the host with that much missing from its middle, well
// framed, as if whole, one of known length was cut, and the head waited
// for the rest of the upload. internal/proxy does the same for a host
// here.
func TestForwardLeavesTheUploadWhole(t *testing.T) {
	t.Parallel()
	var seed [32]byte
	big := make([]byte, 1<<20+512<<10)
	_, _ = rand.NewChaCha8(seed).Read(big)
	ids := []string{"ap", "us"}
	app := ownedBy(t, "ap", ids)
	for _, overTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) {
			t.Parallel()
			cs := startClusters(t, clusterSetup{ids: ids, tls: overTLS})
			host := httptest.NewServer(http.HandlerFunc(testutil.DuplexHost))
			t.Cleanup(host.Close)
			u, _ := url.Parse(host.URL)
			cs["ap"].b.SetHost(&route.Host{ID: "ap-h1", Apps: slices.Clone(clApps), Addr: u.Host, Scheme: "http", URL: u, State: route.HostVerified})
			for _, tc := range []struct {
				name    string
				chunked bool
				pre     int // what the host reads before its head
				parts   [][]byte
			}{
				{"chunked, answered at once", true, 0, [][]byte{big[:1<<20], big[1<<20:]}},
				{"chunked, answered after the first part", true, 1 << 20, [][]byte{big[:1<<20], big[1<<20:]}},
				{"length, answered at once", false, 0, [][]byte{big[:1<<20], big[1<<20:]}},
				// What is left as the head goes out is under 256 KiB:
				// net/http read it all, and closed the body.
				{"length, answered after the first part", false, 1 << 20, [][]byte{big[:1<<20], big[1<<20 : 1<<20+128<<10]}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					h := sha256.New()
					n := 0
					for _, p := range tc.parts {
						h.Write(p)
						n += len(p)
					}
					want := fmt.Sprintf("%d %x", n, h.Sum(nil))
					c := dialDuplex(t, cs["us"], overTLS)
					path := fmt.Sprintf("/hash?pre=%d", tc.pre)
					br := bufio.NewReader(c)
					res, got, err := duplexUpload(c, br, app+"."+testZone, path, tc.chunked, tc.parts)
					if err != nil {
						t.Fatalf("POST via us: %v", err)
					}
					if res.StatusCode != http.StatusOK || string(got) != want || res.Header.Get("X-Gatehouse-Cluster") != "ap" {
						t.Fatalf("POST via us: %d from %q, %q; want 200 from ap, the host having read %q", res.StatusCode, res.Header.Get("X-Gatehouse-Cluster"), got, want)
					}
					checkNextRequest(t, c, br, res, app+"."+testZone)
				})
			}
		})
	}
}

// dialDuplex connects to c's gateway from clientAddr, over TLS (HTTP/1.1)
// when overTLS.
func dialDuplex(t *testing.T, c *testCluster, overTLS bool) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
	addr := c.ln.Addr().String()
	var conn net.Conn
	var err error
	if overTLS {
		conn, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: c.roots, NextProtos: []string{"http/1.1"}})
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { conn.Close() })
	return conn
}

// duplexUpload POSTs parts to path on c: the first at once, each next
// once the answer's head is in or headWait has passed, in 64 KiB pieces
// (chunks when chunked, else under a Content-Length). It returns the
// answer, read whole, once the upload is sent; an error too if the head
// had not come by headWait.
func duplexUpload(c net.Conn, br *bufio.Reader, host, path string, chunked bool, parts [][]byte) (*http.Response, []byte, error) {
	headIn := make(chan struct{})
	sent := make(chan error, 1)
	go func() { sent <- sendParts(c, host, path, chunked, parts, headIn) }()
	res, err := http.ReadResponse(br, nil)
	close(headIn)
	if err != nil {
		<-sent
		return nil, nil, fmt.Errorf("no answer: %w", err)
	}
	b, err := io.ReadAll(res.Body)
	if serr := <-sent; serr != nil && err == nil {
		err = fmt.Errorf("sending the upload: %w", serr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("answer %d, %q: %w", res.StatusCode, b, err)
	}
	return res, b, nil
}

func sendParts(c net.Conn, host, path string, chunked bool, parts [][]byte, headIn <-chan struct{}) error {
	waited := false
	head := "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n"
	if !chunked {
		n := 0
		for _, p := range parts {
			n += len(p)
		}
		head = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", path, host, n)
	}
	if _, err := io.WriteString(c, head); err != nil {
		return err
	}
	for i, p := range parts {
		if i > 0 {
			select {
			case <-headIn:
			case <-time.After(headWait):
				waited = true
			}
		}
		for len(p) > 0 {
			piece := p[:min(len(p), 64<<10)]
			p = p[len(piece):]
			frame := piece
			if chunked {
				frame = fmt.Appendf(nil, "%x\r\n%s\r\n", len(piece), piece)
			}
			if _, err := c.Write(frame); err != nil {
				return err
			}
		}
	}
	if chunked {
		if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
			return err
		}
	}
	if waited {
		// A server stuck reading the rest as it writes the head.
		return fmt.Errorf("the answer's head had not come %s into the upload: its rest sent without it", headWait)
	}
	return nil
}

// checkNextRequest checks that c, after the answer res, carries a GET, or
// was closed cleanly after an answer that said so.
func checkNextRequest(t *testing.T, c net.Conn, br *bufio.Reader, res *http.Response, host string) {
	t.Helper()
	if res.Close {
		if _, err := br.Peek(1); err != io.EOF {
			t.Fatalf("after an answer with Connection: close: %v; want the connection closed", err)
		}
		return
	}
	if _, err := io.WriteString(c, "GET /next HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatalf("the next request on the connection: %v", err)
	}
	next, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the next request on the connection: %v", err)
	}
	b, err := io.ReadAll(next.Body)
	if next.StatusCode != http.StatusOK || string(b) != "next" || err != nil {
		t.Fatalf("the next request: %d %q, %v; want 200 next", next.StatusCode, b, err)
	}
}
