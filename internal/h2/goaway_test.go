package h2

import (
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// closeSeen is what a client saw of a connection told to go away, read to
// its end.
type closeSeen struct {
	goaways []*http2.GoAwayFrame // in order
	status  map[uint32]string
	body    map[uint32]string
	ended   map[uint32]bool
	resets  map[uint32]http2.ErrCode
	pings   int // PINGs the server sent (not ACKs)
}

// readToClose reads rc until the server closes it, acknowledging the
// server's PINGs when ack is set, as every client must (RFC 9113 §6.7).
func readToClose(t *testing.T, rc *rawClient, ack bool) closeSeen {
	t.Helper()
	seen := closeSeen{status: map[uint32]string{}, body: map[uint32]string{}, ended: map[uint32]bool{}, resets: map[uint32]http2.ErrCode{}}
	for {
		f, err := rc.next()
		if err != nil {
			if isTimeout(err) {
				t.Fatalf("the connection was not closed: no frame for 10 s (so far %+v)", seen)
			}
			return seen
		}
		id := f.Header().StreamID
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			g := *f
			seen.goaways = append(seen.goaways, &g)
		case *http2.PingFrame:
			if !f.IsAck() {
				seen.pings++
				if ack {
					_ = rc.fr.WritePing(true, f.Data)
				}
			}
		case *http2.MetaHeadersFrame:
			if seen.status[id] == "" {
				seen.status[id] = f.PseudoValue("status")
			}
			seen.ended[id] = seen.ended[id] || f.StreamEnded()
		case *http2.DataFrame:
			seen.body[id] += string(f.Data())
			seen.ended[id] = seen.ended[id] || f.StreamEnded()
			if n := f.Header().Length; n > 0 {
				_ = rc.fr.WriteWindowUpdate(0, n)
			}
		case *http2.RSTStreamFrame:
			seen.resets[id] = f.ErrCode
		}
	}
}

func isTimeout(err error) bool {
	te, ok := err.(interface{ Timeout() bool })
	return ok && te.Timeout()
}

// TestConnectionCloseRefusesNothingInFlight: a handler's Connection:
// close ends its connection gracefully (RFC 9113 §6.8): a stream the
// client opened before it read the server's GOAWAY is served, not refused,
// for it may be one a client cannot send again (a body it streamed). The
// first GOAWAY names 2^31-1, with a PING; the last stream is named once the
// client has answered the PING (or, from a client that does not, after a
// bound), and the connection closes once both streams are answered. A
// GOAWAY naming the last stream read at once refused the stream that
// crossed it (REFUSED_STREAM).
func TestConnectionCloseRefusesNothingInFlight(t *testing.T) {
	t.Parallel()
	for _, ack := range []bool{true, false} {
		name := map[bool]string{true: "client answers the PING", false: "client ignores the PING"}[ack]
		t.Run(name, func(t *testing.T) {
			headed, release := make(chan struct{}), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/close" {
					_, _ = io.WriteString(w, "in flight")
					return
				}
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				close(headed)
				<-release
				_, _ = io.WriteString(w, "closed")
			})
			_, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			rc.headers(1, true, reqFields("GET", "/close")...)
			select {
			case <-headed:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler never wrote its head")
			}
			// The server has said it goes away; the client, yet to read
			// it, opens its next stream.
			rc.headers(3, true, reqFields("GET", "/next")...)
			close(release)
			seen := readToClose(t, rc, ack)

			for id, want := range map[uint32]string{1: "closed", 3: "in flight"} {
				if code, ok := seen.resets[id]; ok {
					t.Errorf("stream %d reset: %v; want it answered", id, code)
				}
				if seen.status[id] != "200" || !seen.ended[id] || seen.body[id] != want {
					t.Errorf("stream %d: status %q, ended %v, body %q; want 200 %q in full", id, seen.status[id], seen.ended[id], seen.body[id], want)
				}
			}
			if len(seen.goaways) != 2 {
				t.Fatalf("%d GOAWAYs (%v); want 2: 2^31-1, then the last stream", len(seen.goaways), seen.goaways)
			}
			for _, g := range seen.goaways {
				if g.ErrCode != http2.ErrCodeNo {
					t.Errorf("GOAWAY %v, want NO_ERROR", g.ErrCode)
				}
			}
			if first, last := seen.goaways[0].LastStreamID, seen.goaways[1].LastStreamID; first != 1<<31-1 || last != 3 {
				t.Errorf("GOAWAYs name streams %d then %d; want %d then 3", first, last, uint32(1<<31-1))
			}
			if seen.pings != 1 {
				t.Errorf("%d PINGs from the server; want 1, with the first GOAWAY", seen.pings)
			}
		})
	}
}

// TestGoAwayNeverNamesAHigherStream: once a GOAWAY has named the last
// stream served, a later one never names a higher stream (RFC 9113 §6.8:
// MUST NOT increase), though streams the client had in flight came after
// it and were refused: a connection error then (GOAWAY PROTOCOL_ERROR)
// names the same last stream. It named the last id read, so the client
// was told of a stream served that had been refused. Both ways a
// connection goes away: a handler's Connection: close (GOAWAY 2^31-1, its
// PING answered, then GOAWAY 1) and the client's own GOAWAY (the drain's:
// GOAWAY 1 at once).
func TestGoAwayNeverNamesAHigherStream(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		close bool // the handler says Connection: close; else the client sends GOAWAY
		named int  // GOAWAYs before the refusal: the last names stream 1
	}{
		{"a handler's Connection: close", true, 2},
		{"the client's GOAWAY", false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.close {
					w.Header().Set("Connection", "close")
				}
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-release // stream 1 stays open: the connection too
			})
			_, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			var last []uint32 // what the GOAWAYs name
			read := func(f http2.Frame) {
				switch f := f.(type) {
				case *http2.PingFrame:
					if !f.IsAck() {
						_ = rc.fr.WritePing(true, f.Data)
					}
				case *http2.GoAwayFrame:
					last = append(last, f.LastStreamID)
				}
			}
			rc.headers(1, true, reqFields("GET", "/")...)
			rc.until("stream 1's head", func(f http2.Frame) bool {
				read(f)
				_, ok := f.(*http2.MetaHeadersFrame)
				return ok
			})
			if !tt.close {
				_ = rc.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			}
			for len(last) < tt.named {
				rc.until("a GOAWAY", func(f http2.Frame) bool {
					read(f)
					_, ok := f.(*http2.GoAwayFrame)
					return ok
				})
			}
			if last[len(last)-1] != 1 {
				t.Fatalf("GOAWAYs name %v; want the last to name 1", last)
			}
			rc.headers(3, true, reqFields("GET", "/")...) // in flight: refused
			rc.headers(2, true, reqFields("GET", "/")...) // a connection error
			rc.until("the connection error's GOAWAY", func(f http2.Frame) bool {
				g, ok := f.(*http2.GoAwayFrame)
				if ok && (g.ErrCode != http2.ErrCodeProtocol || g.LastStreamID != 1) {
					t.Errorf("GOAWAY %v naming %d after one naming 1; want PROTOCOL_ERROR naming 1", g.ErrCode, g.LastStreamID)
				}
				return ok
			})
		})
	}
}

// TestGraceEndsWithThePingAnswer: the client's answer to the PING that
// came with a graceful GOAWAY (2^31-1) ends the grace there and then: the
// GOAWAY naming the last stream follows it, and a stream the client opens
// after answering (it had read the GOAWAY, so it opens one it was told
// not to) is refused, not served as within the grace's bound (graceWait)
// it would be.
func TestGraceEndsWithThePingAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/close" {
			return
		}
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-release
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	rc.headers(1, true, reqFields("GET", "/close")...)
	rc.until("the server's PING", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		if ok && !p.IsAck() {
			_ = rc.fr.WritePing(true, p.Data)
			return true
		}
		return false
	})
	rc.headers(3, true, reqFields("GET", "/late")...)
	var refused, named bool
	rc.until("stream 3's refusal and the GOAWAY naming stream 1", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			refused = refused || f.StreamID == 3 && f.ErrCode == http2.ErrCodeRefusedStream
		case *http2.MetaHeadersFrame:
			if f.StreamID == 3 {
				t.Fatalf("stream 3, opened after the PING was answered, served: %s", f.PseudoValue("status"))
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID != 1<<31-1 {
				if f.LastStreamID != 1 {
					t.Fatalf("GOAWAY names %d; want 1, the last stream before the PING's answer", f.LastStreamID)
				}
				named = true
			}
		}
		return refused && named
	})
}
