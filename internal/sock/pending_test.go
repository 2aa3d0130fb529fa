//go:build linux

package sock

import (
	"io"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestPending: Pending says whether the peer sent something a Read would
// return without waiting (a byte, or its end), and takes nothing: the
// next Read still gets it.
func TestPending(t *testing.T) {
	cc, peer := testutil.TCPPair(t)
	c := Wrap(cc).(*Conn)
	if c.Pending() {
		t.Fatal("Pending on a quiet connection")
	}
	if _, err := peer.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(5*time.Second, c.Pending) {
		t.Fatal("Pending false after the peer wrote")
	}
	if !c.Pending() {
		t.Fatal("a second look took what the first saw")
	}
	buf := make([]byte, 4)
	if n, err := io.ReadFull(c, buf[:2]); err != nil || string(buf[:n]) != "ab" {
		t.Fatalf("read after Pending: %q %v", buf[:n], err)
	}
	if c.Pending() {
		t.Fatal("Pending after the bytes were read")
	}
	_ = peer.CloseWrite()
	if !testutil.Eventually(5*time.Second, c.Pending) {
		t.Fatal("Pending false after the peer's end: a Read would return at once")
	}
	c.Close()
	if !c.Pending() {
		t.Fatal("Pending false on a closed Conn: the caller should read and find out")
	}
}
