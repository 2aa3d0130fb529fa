package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2ClientGetsNoConnectionSpecificField: a host's connection-specific
// fields (RFC 9113 §8.2.2: Connection and what it names, Keep-Alive,
// Proxy-Connection, Transfer-Encoding, Upgrade, TE) reach an HTTP/2
// client on no header block of the stream, neither its 103, nor its
// final head, nor its trailers: any of them makes the response malformed
// to a strict client (nghttp2, browsers). Read frame by frame, since Go's
// client does not check. The fast path (GET) and ReverseProxy (POST).
func TestH2ClientGetsNoConnectionSpecificField(t *testing.T) {
	const answer = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n" +
		"Connection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-T, Connection, Te\r\n" +
		"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\n\r\n" +
		"2\r\nok\r\n0\r\nX-T: end\r\nConnection: close\r\nKeep-Alive: 1\r\nTe: trailers\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\nProxy-Connection: x\r\n\r\n"
	addr := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	e := newEnv(t, nil)
	e.addHost("h1", "hello", "http", "http://"+addr)
	_, httpsAddr := e.serve(false)
	forbidden := map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true,
		"transfer-encoding": true, "upgrade": true, "te": true, "x-hop": true}
	for _, method := range []string{"GET", "POST"} {
		c, err := tls.Dial("tcp", httpsAddr, &tls.Config{InsecureSkipVerify: true, ServerName: "hello." + testZone, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		_ = fr.WriteSettings()
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		fields := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "hello." + testZone}, {":path", "/"}}
		if method == "POST" {
			fields = append(fields, [2]string{"content-length", strconv.Itoa(len("up"))})
		}
		for _, f := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: method == "GET"}); err != nil {
			t.Fatal(err)
		}
		if method == "POST" {
			if err := fr.WriteData(1, true, []byte("up")); err != nil {
				t.Fatal(err)
			}
		}
		var got []string // status codes and trailer names, in order
		var bad []string
		dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
			if f.Name == ":status" || f.Name == "x-t" {
				got = append(got, f.Name+"="+f.Value)
			}
			if forbidden[f.Name] {
				bad = append(bad, f.Name+": "+f.Value)
			}
		})
		for done := false; !done; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%s: after %q: %v", method, got, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.HeadersFrame:
				if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
					t.Fatal(err)
				}
				done = f.StreamEnded()
			case *http2.ContinuationFrame:
				if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
					t.Fatal(err)
				}
			case *http2.DataFrame:
				done = f.StreamEnded()
			case *http2.RSTStreamFrame:
				t.Fatalf("%s: stream reset: %v", method, f.ErrCode)
			case *http2.GoAwayFrame:
				t.Fatalf("%s: GOAWAY: %v", method, f.ErrCode)
			}
		}
		c.Close()
		if want := []string{":status=103", ":status=200", "x-t=end"}; !equalStrings(got, want) {
			t.Errorf("%s: header blocks %q, want %q", method, got, want)
		}
		if len(bad) > 0 {
			t.Errorf("%s: connection-specific fields reached the HTTP/2 client: %q", method, bad)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
