package h2

import (
	"net/http"
	"testing"

	"golang.org/x/net/http2"
)

// TestNearlyDrainedBodiesLetGo: as TestDrainedBodiesLetGo, for bodies read
// all but their last byte (a proxy whose host stopped taking the upload
// just short of its end). Each kept a buffer as large as the most of its
// body that ever waited unread, up to a stream's window's worth, whatever
// was left in it: one connection, a stream after another, held 250 of
// them (~300 MB) while its window said 250 bytes were unread.
func TestNearlyDrainedBodiesLetGo(t *testing.T) {
	t.Parallel()
	const each, streams = 512 << 10, 16
	arrived, read := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the whole body waits unread first, as when the host is slow
		case <-arrived:
		case <-r.Context().Done():
			return
		}
		buf := make([]byte, 32<<10)
		for n := 0; n < each-1; {
			m, err := r.Body.Read(buf[:min(len(buf), each-1-n)])
			if n += m; err != nil {
				return
			}
		}
		select {
		case read <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		<-r.Context().Done()
	})
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	chunk := make([]byte, 16<<10)
	for i := range streams {
		id := uint32(2*i + 1)
		rc.headers(id, false, reqFields("POST", "/up")...)
		for range each / len(chunk) {
			if err := rc.fr.WriteData(id, false, chunk); err != nil {
				t.Fatal(err)
			}
		}
		// The server reads frames in order: once the PING is answered,
		// the DATA before it is in the body's buffer.
		if err := rc.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		rc.until("the PING's answer", func(f http2.Frame) bool {
			p, ok := f.(*http2.PingFrame)
			return ok && p.IsAck() && p.Data[0] == byte(i)
		})
		arrived <- struct{}{}
		<-read
	}
	held, unread := 0, 0
	s.mu.Lock()
	for cn := range s.conns {
		cn.mu.Lock()
		for _, st := range cn.streams {
			st.body.mu.Lock()
			held += cap(st.body.buf)
			unread += len(st.body.buf) - st.body.off
			st.body.mu.Unlock()
		}
		cn.mu.Unlock()
	}
	s.mu.Unlock()
	if unread != streams || held > 2*streamWindow {
		t.Fatalf("%d streams whose bodies were read but %d bytes (want %d) hold %d bytes of buffer", streams, unread, streams, held)
	}
}
