package edge

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// TestPassthroughPipesTheHelloAsSent: whatever shape the hello of a
// passthrough name takes (the name in upper case, a post-quantum key
// share in many small records, 0-RTT data right behind it, an ACME
// TLS-ALPN-01 offer, which the host answers for its own names), the host
// gets every byte the client sent, as sent: the peek reads, it never
// consumes or rewrites.
func TestPassthroughPipesTheHelloAsSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	received := make(chan net.Conn)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case received <- c:
			case <-stop:
				c.Close()
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); ln.Close(); <-done })
	e := start(t, Options{Passthrough: RoutePassthrough(table(ln.Addr().String()), nil)})

	early := []byte{23, 3, 3, 0, 5, 'e', 'a', 'r', 'l', 'y'} // an application data record
	for _, c := range []struct {
		name   string
		cfg    *tls.Config
		frag   int // records of at most this many bytes; 0: as crypto/tls sent it
		suffix []byte
	}{
		{"upper case name", &tls.Config{ServerName: "SECURE." + zone}, 0, nil},
		{"post-quantum hello in 7-byte records", &tls.Config{ServerName: "secure." + zone, CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}}, 7, nil},
		{"0-RTT data behind the hello", &tls.Config{ServerName: "secure." + zone}, 0, early},
		{"small records and 0-RTT data", &tls.Config{ServerName: "secure." + zone}, 100, early},
		{"ACME TLS-ALPN-01", &tls.Config{ServerName: "secure." + zone, NextProtos: []string{"acme-tls/1"}}, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent := capturedHello(t, c.cfg)
			if c.frag > 0 {
				sent = inRecords(sent[5:], c.frag)
			}
			sent = append(sent, c.suffix...)
			conn, err := net.Dial("tcp", e.https)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(sent); err != nil {
				t.Fatal(err)
			}
			var host net.Conn
			select {
			case host = <-received:
			case <-time.After(10 * time.Second):
				t.Fatal("not piped to the host")
			}
			defer host.Close()
			_ = host.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := make([]byte, len(sent))
			if _, err := io.ReadFull(host, got); err != nil {
				t.Fatalf("host read: %v", err)
			}
			if !bytes.Equal(got, sent) {
				t.Fatal("the host got other bytes than the client sent")
			}
		})
	}
}

// capturedHello returns the record crypto/tls sends as a client with cfg.
func capturedHello(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	cc, sc := net.Pipe()
	defer sc.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = tls.Client(cc, cfg).Handshake()
	}()
	_ = sc.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(sc, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(sc, body); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	<-ended
	return append(hdr, body...)
}

// inRecords cuts a handshake payload into records of at most n bytes.
func inRecords(payload []byte, n int) []byte {
	var out []byte
	for len(payload) > 0 {
		k := min(n, len(payload))
		out = append(out, 22, 3, 1, byte(k>>8), byte(k))
		out = append(out, payload[:k]...)
		payload = payload[k:]
	}
	return out
}
