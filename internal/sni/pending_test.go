package sni

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// quiet is a connection with nothing to read and a Pending that says so.
type quiet struct{ net.Conn }

func (quiet) Pending() bool { return false }

// TestPending: a Conn has something to read while bytes it peeked are not
// yet replayed; after, it asks the connection under it, and says true
// when that one cannot tell.
func TestPending(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "app.example.com"})
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	go func() { _, _ = b.Write(hello) }()
	_, pc, err := Peek(quiet{a}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !pc.Pending() {
		t.Fatal("Pending false with the hello not yet replayed")
	}
	buf := make([]byte, len(hello))
	for off := 0; off < len(hello); {
		n, err := pc.Read(buf[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if pc.Pending() {
		t.Fatal("Pending true once replayed, over a connection that says nothing came")
	}
	blind := &Conn{Conn: a}
	if !blind.Pending() {
		t.Fatal("Pending false over a connection that cannot tell")
	}
}
