package edge

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sock"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestTrackedPending: the connection an HTTP/2 server gets under TLS
// (NetConn of the tls.Conn) tells whether the client sent anything, as the
// sock.Conn under it does, so that the server's inline handlers see a
// client's frames (internal/h2, inline.go).
func TestTrackedPending(t *testing.T) {
	c, peer := testutil.TCPPair(t)
	tc := newTracker(nil, time.Minute).wrap(sock.Wrap(c), source{})
	var under any = tls.Server(tc, &tls.Config{}).NetConn()
	p, ok := under.(interface{ Pending() bool })
	if !ok {
		t.Fatalf("%T has no Pending", under)
	}
	if p.Pending() {
		t.Fatal("Pending on a quiet connection")
	}
	if _, err := peer.Write([]byte{0x16}); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(5*time.Second, p.Pending) {
		t.Fatal("Pending false after the client wrote")
	}
}
