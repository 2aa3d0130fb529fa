package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// rawApp is an app on loopback that answers each request with raw, as
// it is, and closes the connection: answers net/http's server would not
// write.
func rawApp(t *testing.T, raw string) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.ServeConns(t, ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.WriteString(c, raw)
			// The sidecar closes its end once it has the answer (or the
			// tunnel's client left).
			c.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, c)
		}
	})
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// The sidecar takes the app's hop-by-hop fields off an interim (1xx)
// answer and off a 101, as it does off a final answer (ReverseProxy
// removes them from the final answer only): Connection, what it names,
// Keep-Alive, Proxy-*. And a final answer the app sent untyped after a
// 1xx stays untyped: net/http would sniff one (text/html for this body)
// once ReverseProxy had cleared the header map after the 1xx.
func TestSidecarCleansInterimAndUpgradeAnswers(t *testing.T) {
	t.Run("103 then 200", func(t *testing.T) {
		up := rawApp(t, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: X-Foo\r\nX-Foo: hop\r\nKeep-Alive: timeout=5\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 38\r\n\r\n<html><script>alert(1)</script></html>")
		side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.DiscardHandler)))
		defer side.Close()
		var interim []textproto.MIMEHeader
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				interim = append(interim, h)
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", side.URL+"/", nil)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "<html><script>alert(1)</script></html>" {
			t.Fatalf("%d %q", res.StatusCode, b)
		}
		if ct, ok := res.Header["Content-Type"]; ok {
			t.Errorf("Content-Type %q on a body the app sent untyped after a 103", ct)
		}
		if len(interim) != 1 {
			t.Fatalf("%d interim answers, want the 103", len(interim))
		}
		if h := interim[0]; h.Get("Link") != "</a.css>; rel=preload" || h.Get("Connection") != "" || h.Get("X-Foo") != "" || h.Get("Keep-Alive") != "" {
			t.Errorf("the 103 reached the client with %v, want its Link alone", h)
		}
	})
	t.Run("101", func(t *testing.T) {
		up := rawApp(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade, X-Foo\r\nUpgrade: echo\r\nX-Foo: hop\r\n"+
			"Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-App: kept\r\n\r\nhello")
		side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.DiscardHandler)))
		defer side.Close()
		c, err := net.Dial("tcp", side.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := res.Header
		if res.StatusCode != 101 || h.Get("Connection") != "Upgrade" || h.Get("Upgrade") != "echo" || h.Get("X-App") != "kept" ||
			h.Get("X-Foo") != "" || h.Get("Keep-Alive") != "" || h.Get("Proxy-Authenticate") != "" {
			t.Errorf("the 101 reached the client as %d %v, want Connection: Upgrade, Upgrade and X-App alone", res.StatusCode, h)
		}
		if b, _ := io.ReadAll(io.LimitReader(br, 5)); string(b) != "hello" {
			t.Errorf("after the 101: %q", b)
		}
	})
}

// An answer whose status is no HTTP status (RFC 9110 §15: 100-599) is a
// 502 problem+json, logged: one under 100 made ReverseProxy panic, and
// the client's connection closed unanswered with nothing logged (a
// gateway takes that for a broken host); one over 599 went on as sent.
func TestSidecarRefusesAStatusOutOfRange(t *testing.T) {
	for _, status := range []string{"099", "600"} {
		up := rawApp(t, "HTTP/1.1 "+status+" Odd\r\nContent-Length: 2\r\n\r\nok")
		var log testutil.SyncBuffer
		side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.NewJSONHandler(&log, nil))))
		tr := &http.Transport{}
		res, err := (&http.Client{Transport: tr}).Get(side.URL + "/")
		if err != nil {
			t.Errorf("status %s: %v", status, err)
		} else {
			res.Body.Close()
			if res.StatusCode != http.StatusBadGateway || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("status %s: the client got %d %q, want a problem+json 502", status, res.StatusCode, res.Header.Get("Content-Type"))
			}
		}
		if !strings.Contains(log.String(), `"msg":"host: upstream failed"`) || !strings.Contains(log.String(), "status "+status) {
			t.Errorf("status %s: not logged:\n%s", status, log.String())
		}
		tr.CloseIdleConnections()
		side.Close()
	}
}
