package edge

import (
	"io"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sni"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestTrackedCloseWriteUnderSNI: a terminated https connection (counted,
// over the peek's replaying sni.Conn, over the socket) half-closes when
// its server ends its side: the client reads the end (FIN), and what it
// sends after still reaches the server. internal/h2 ends its side so
// before it reads out a client that goes on sending (conn.linger);
// without the FIN a client that waits for the end waits out the linger.
func TestTrackedCloseWriteUnderSNI(t *testing.T) {
	c, peer := testutil.TCPPair(t)
	tc := newTracker(nil, time.Minute).wrap(&sni.Conn{Conn: sock.Wrap(c)}, source{})
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the client read %d, %v; want the end (EOF)", n, err)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 1)
	if _, err := io.ReadFull(tc, b); err != nil || b[0] != 'x' {
		t.Fatalf("the server read %q, %v after its half-close; want x", b, err)
	}
}
