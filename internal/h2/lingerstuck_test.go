package h2

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestGoingAwayFromAClientThatReadsNothing: a connection idle long
// enough goes away even when its reader is stuck writing a PING's ACK to
// a client that reads nothing (a pipe: no buffer takes the ACK). The
// reader is woken to end the connection by a read's deadline
// (wakeToEnd), which a reader stuck in a write never meets: its write
// gets a deadline as well.
func TestGoingAwayFromAClientThatReadsNothing(t *testing.T) {
	t.Parallel()
	s, err := New(Options{Handler: http.NotFoundHandler(), IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sc, cc := net.Pipe()
	defer cc.Close()
	served := make(chan struct{})
	go func() { defer close(served); s.ServeConn(sc) }()
	wrote := make(chan error, 1)
	go func() {
		fr := http2.NewFramer(cc, nil)
		_, err := io.WriteString(cc, http2.ClientPreface)
		if err == nil {
			err = fr.WriteSettings()
		}
		if err == nil {
			err = fr.WritePing(false, [8]byte{1})
		}
		wrote <- err
	}()
	// The server's SETTINGS, WINDOW_UPDATE and SETTINGS ACK are read;
	// nothing after.
	fr := http2.NewFramer(nil, cc)
	_ = cc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range 3 {
		if _, err := fr.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection was not let go")
	}
}
