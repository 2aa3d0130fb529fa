package edge

import (
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// lingerSeen is what a client saw of one stream and of its connection,
// read until the server closed it.
type lingerSeen struct {
	res     h2Resp
	goaways []http2.GoAwayFrame
	closed  bool
}

// readUntilClosed reads r until the server closes the connection,
// acknowledging its PINGs as a client must (RFC 9113 §6.7), and records
// stream id and every GOAWAY. A read that waits past rawH2ReadWait fails
// the test: the server left the connection open.
func readUntilClosed(t *testing.T, r *rawH2, id uint32) lingerSeen {
	t.Helper()
	var seen lingerSeen
	deadline := time.Now().Add(rawH2Total)
	for time.Now().Before(deadline) {
		f, err := r.read()
		if err != nil {
			if isTimeout(err) {
				t.Fatalf("stream %d: the connection is still open, silent for %v (so far %+v)", id, rawH2ReadWait, seen)
			}
			seen.closed = true
			return seen
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			seen.goaways = append(seen.goaways, *f)
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = r.fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && seen.res.status == "" {
				seen.res.status = f.PseudoValue("status")
			}
			seen.res.ended = seen.res.ended || f.StreamID == id && f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID == id {
				seen.res.body = append(seen.res.body, f.Data()...)
				seen.res.ended = seen.res.ended || f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				seen.res.reset, seen.res.rstCode = true, f.ErrCode
			}
		}
	}
	t.Fatalf("stream %d: the connection is still open after %v (so far %+v)", id, rawH2Total, seen)
	return seen
}

// TestLingerEndsH2Connections: during a delayed drain (Linger) an HTTP/2
// connection, opened before it or during it, is told to go away once it
// has answered its next stream, as an HTTP/1.1 answer then says
// Connection: close: its client's next request goes through the load
// balancer, which by then routes elsewhere. The answer comes in full, the
// stream is neither refused nor reset, every GOAWAY says NO_ERROR and
// the last names that stream, and the connection then closes. Run on both
// HTTP/2 servers: gatehouse's own served such connections on, silent,
// until the drain.
func TestLingerEndsH2Connections(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{DrainTimeout: 10 * time.Second})
		old := dialRawH2(t, e.https)
		if res := old.get(1, "/"); res.status != "200" || res.goaway {
			t.Fatalf("before Linger: status %q, GOAWAY %v; want 200 and the connection kept", res.status, res.goaway)
		}
		e.Linger(time.Minute)
		for _, c := range []struct {
			name string
			r    *rawH2
			id   uint32
		}{
			{"a connection idle since before the delay", old, 3},
			{"a connection opened during the delay", dialRawH2(t, e.https), 1},
		} {
			c.r.headers(c.id, request("GET", "/"), true)
			seen := readUntilClosed(t, c.r, c.id)
			if want := "l7 HTTP/2.0 api." + zone; seen.res.status != "200" || !seen.res.ended || string(seen.res.body) != want {
				t.Errorf("%s: status %q, ended %v, body %q; want 200 %q in full", c.name, seen.res.status, seen.res.ended, seen.res.body, want)
			}
			if seen.res.reset {
				t.Errorf("%s: stream reset (%v); want it answered", c.name, seen.res.rstCode)
			}
			if len(seen.goaways) == 0 {
				t.Errorf("%s: closed with no GOAWAY; want GOAWAY after its answer", c.name)
				continue
			}
			for _, g := range seen.goaways {
				if g.ErrCode != http2.ErrCodeNo {
					t.Errorf("%s: GOAWAY %v; want NO_ERROR", c.name, g.ErrCode)
				}
			}
			if last := seen.goaways[len(seen.goaways)-1].LastStreamID; last != c.id {
				t.Errorf("%s: the last GOAWAY names stream %d; want %d, the one answered", c.name, last, c.id)
			}
		}
		if err := e.stop(t); err != nil {
			t.Fatal(err)
		}
		e.done <- nil // for the cleanup
	})
}
