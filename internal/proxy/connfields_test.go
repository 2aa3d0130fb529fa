package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHeadConnNotesConnectionNames: the names each response head's
// Connection lists are noted however the reads split the bytes, the 1xx
// heads' apart from the final one's, an obs-fold included, a body never
// scanned (a line in it that looks like a field), and nothing from bytes
// that are no head.
func TestHeadConnNotesConnectionNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		status   int
		final    []string
		interim  [][]string
	}{
		{"close and a name", "HTTP/1.1 200 OK\r\nConnection: close, x-foo\r\nContent-Length: 20\r\n\r\nConnection: x-body\r\n",
			200, []string{"Close", "X-Foo"}, nil},
		{"two fields and a fold", "HTTP/1.1 404 No\r\nConnection: close\r\nX-A: 1\r\nconnection: X-B,\r\n X-C\r\n\r\n",
			404, []string{"Close", "X-B", "X-C"}, nil},
		{"1xx first", "HTTP/1.1 103 Hints\r\nConnection: close, X-Hint\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No\nConnection: close, X-Foo\n\n",
			204, []string{"Close", "X-Foo"}, [][]string{{"Close", "X-Hint"}, nil}},
		{"no connection", "HTTP/1.1 200 OK\r\nX-Foo: 1\r\n\r\n", 200, nil, nil},
		{"no head", "HTTP/2 200\r\nConnection: close, X-Foo\r\n\r\n", 200, nil, nil},
		// Status lines net/http's client takes and the gateway refuses
		// (statusLine): the exchange fails, nothing passes to be dropped.
		{"spaces before the code", "HTTP/1.1   200\r\nConnection: close, X-Foo\r\n\r\n", 200, nil, nil},
		{"another version", "HTTP/2.0 200 OK\r\nConnection: close, X-Foo\r\n\r\n", 200, nil, nil},
		{"a later minor version", "HTTP/1.2 200 OK\r\nConnection: close, X-Foo\r\n\r\n", 200, []string{"Close", "X-Foo"}, nil},
		{"no code", "HTTP/1.1 20 OK\r\nConnection: close, X-Foo\r\n\r\n", 20, nil, nil},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 2, 7, len(tt.in)} {
			c := new(headConn)
			f := c.begin("GET")
			c.phase, c.await = phaseHead, false // as the request's write does
			c.arm(f)
			for b := []byte(tt.in); len(b) > 0; {
				n := min(size, len(b))
				c.scan(b[:n])
				b = b[n:]
			}
			for i, want := range tt.interim {
				if got := f.take1xx(); !slices.Equal(got, want) {
					t.Errorf("%s, reads of %d: 1xx %d names %q, want %q", tt.name, size, i, got, want)
				}
			}
			if got := f.take1xx(); got != nil {
				t.Errorf("%s, reads of %d: a 1xx too many, %q", tt.name, size, got)
			}
			if got := f.final(tt.status); !slices.Equal(got, tt.final) {
				t.Errorf("%s, reads of %d: final names %q, want %q", tt.name, size, got, tt.final)
			}
			if got := f.final(tt.status + 1); got != nil {
				t.Errorf("%s, reads of %d: names %q for another status", tt.name, size, got)
			}
		}
	}
}

// TestHeadDialTLSSaysHandshakeTimedOut: a host that accepts and never
// answers the ClientHello fails the dial after the bound with an error
// that names TLS and the address (net/http's own handshake said "TLS
// handshake timeout"; the bare context error named neither), still a
// timeout to errors.Is; and the caller's own cancel stays its own error.
func TestHeadDialTLSSaysHandshakeTimedOut(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 4)
	go func() { // owned: ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // never answered; closed below
		}
	}()
	defer func() {
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	var d net.Dialer
	dial := headDialTLS(d.DialContext, &tls.Config{}, 200*time.Millisecond)
	addr := ln.Addr().String()

	_, err = dial(context.Background(), "tcp", addr)
	if err == nil || !strings.Contains(err.Error(), "TLS handshake timeout with "+addr+" after 200ms") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial of a silent host: %v, want a TLS handshake timeout naming %s that is a DeadlineExceeded", err, addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = dial(ctx, "tcp", addr)
	if err == nil || strings.Contains(err.Error(), "TLS handshake timeout") {
		t.Fatalf("dial cancelled by its caller: %v, want the caller's own error", err)
	}
}
