package lane

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// serveTCP serves a loopback listener with a Server made from o, each
// connection wrapped as the edge wraps it (sock: raw system calls, and
// the last of each answer written by the wait for the next request),
// over TLS when cfg is not nil.
func serveTCP(t *testing.T, o Options, cfg ...*tls.Config) string {
	t.Helper()
	if o.Handoff == nil {
		o.Handoff = func(c net.Conn) { c.Close() }
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 5 * time.Second
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c = sock.Wrap(c)
				if len(cfg) > 0 {
					tc := tls.Server(c, cfg[0])
					if err := tc.Handshake(); err != nil {
						c.Close()
						return
					}
					c = tc
				}
				s.ServeConn(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.Close(); wg.Wait() })
	return ln.Addr().String()
}

// TestReply: a connection's answers ride on the waits for its next
// requests, and a client that pipelines still gets every answer, in
// order, whether its next request came with the last (seen at once) or
// while the last was being served (which the wait may not see: the
// parker finds it when the warm wait ends, and the connection replies no
// more).
func TestReply(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		for _, idle := range []time.Duration{0, 200 * time.Millisecond} {
			// With an idle timeout under the warm wait, a wait that ends
			// closes the connection: the missed request must not be lost.
			t.Run(fmt.Sprintf("tls=%v/idle=%v", overTLS, idle), func(t *testing.T) { testReply(t, overTLS, idle) })
		}
	}
}

// selfSigned is a certificate for 127.0.0.1, made for the test.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func testReply(t *testing.T, overTLS bool, idle time.Duration) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			<-release
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "answer "+r.URL.Path)
	})
	var c net.Conn
	var err error
	if overTLS {
		addr := serveTCP(t, Options{Handler: h, IdleTimeout: idle}, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
		c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the test's own certificate
	} else {
		c, err = net.Dial("tcp", serveTCP(t, Options{Handler: h, IdleTimeout: idle}))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	expect := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the answer for %s: %v", p, err)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || string(b) != "answer "+p {
				t.Fatalf("the answer for %s: %d %q", p, res.StatusCode, b)
			}
		}
	}
	send := func(paths ...string) {
		t.Helper()
		var raw strings.Builder
		for _, p := range paths {
			raw.WriteString(get(p))
		}
		if _, err := io.WriteString(c, raw.String()); err != nil {
			t.Fatal(err)
		}
	}

	// One request at a time: from the second on, each answer is a reply.
	for i := range 20 {
		p := fmt.Sprintf("/seq%d", i)
		send(p)
		expect(p)
	}
	// The next request sent while the last is served, before its answer.
	send("/held")
	time.Sleep(20 * time.Millisecond) // the held request is in the handler
	send("/during")
	time.Sleep(20 * time.Millisecond) // its bytes are in the socket
	release <- struct{}{}
	expect("/held", "/during")
	// And again, now that the connection is known to pipeline; then two
	// in one write, and one at a time again.
	send("/held")
	time.Sleep(20 * time.Millisecond)
	send("/during2")
	release <- struct{}{}
	expect("/held", "/during2")
	send("/a", "/b")
	expect("/a", "/b")
	send("/last")
	expect("/last")
}
