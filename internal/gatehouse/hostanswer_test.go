package gatehouse

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// rawAnswers are answers no net/http host writes, which parityHost's /raw
// writes as they are on its hijacked connection.
var rawAnswers = map[string]string{
	"status-000": "HTTP/1.1 000 Zero\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"status-099": "HTTP/1.1 099 Low\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"103-hop": "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\n" +
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTe: gzip\r\nUpgrade: foo\r\n" +
		"Proxy-Authenticate: Basic\r\nTrailer: X-T\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"six-103": strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 6) +
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"five-103": strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 5) +
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
}

// TestParityHostInterimCount: a host may send five 1xx before its answer,
// and the client gets them all and the answer; a sixth makes a 502 after
// the five, on the fast path (GET) as through ReverseProxy (POST, whose
// transport no longer counts them once they are passed on), over every
// server.
func TestParityHostInterimCount(t *testing.T) {
	p := newParityEnv(t)
	for _, tc := range []struct {
		answer string
		status int
	}{{"five-103", http.StatusOK}, {"six-103", http.StatusBadGateway}} {
		for _, method := range []string{"GET", "POST"} {
			q := parityReq{name: method + " " + tc.answer, method: method, target: "/raw?a=" + tc.answer}
			if method == "POST" {
				q.body = "x"
			}
			t.Run(q.name, func(t *testing.T) {
				for _, via := range parityPaths {
					r := p.send(t, via, q)
					if r.Status != tc.status || len(r.Interim) != 5 {
						t.Errorf("via %s: 1xx %v, then %d %.80q; want five 103 then %d", via, r.Interim, r.Status, r.Body, tc.status)
					}
				}
			})
		}
	}
}

// hopFields are the hop-by-hop fields of rawAnswers["103-hop"]'s 103.
var hopFields = []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Connection", "Te", "Upgrade", "Proxy-Authenticate", "Trailer"}

// TestParityHostInterimHopFields: the hop-by-hop fields of a host's 1xx
// (its Connection and those it names, Keep-Alive, TE, Upgrade...) are the
// host's connection's, and never reach the client (RFC 9110 §7.6.1), on
// the fast path (GET) as through ReverseProxy (POST), over HTTP/1.1 and
// HTTP/2, where a TE other than "trailers" or an Upgrade makes the
// response malformed (RFC 9113 §8.2.2); the 103's Link does.
func TestParityHostInterimHopFields(t *testing.T) {
	p := newParityEnv(t)
	for _, method := range []string{"GET", "POST"} {
		q := parityReq{method: method, host: "hello.test.local", target: "/raw?a=103-hop"}
		if method == "POST" {
			q.body = "x"
		}
		t.Run(method, func(t *testing.T) {
			for _, via := range parityPaths {
				var interim []http.Header
				if via == viaH2 {
					tr := p.h2()
					var body io.Reader
					if q.body != "" {
						body = strings.NewReader(q.body)
					}
					req, err := http.NewRequest(method, "https://hello.test.local"+q.target, body)
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
						Got1xxResponse: func(_ int, h textproto.MIMEHeader) error { interim = append(interim, http.Header(h)); return nil },
					})
					res, err := tr.RoundTrip(req.WithContext(ctx))
					if err != nil {
						t.Errorf("via h2: %v", err)
					} else {
						res.Body.Close()
					}
					cancel()
					tr.CloseIdleConnections()
				} else {
					c := p.dial(t, "http/1.1")
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					br := bufio.NewReader(c)
					if via == viaH1 {
						io.WriteString(c, rawReq(parityReq{method: "POST", host: "hello.test.local", target: "/handoff", chunked: true, body: "x"}))
						readRaw(t, br, "POST")
					}
					go io.WriteString(c, rawReq(q))
					for {
						res, err := http.ReadResponse(br, &http.Request{Method: method})
						if err != nil {
							t.Fatalf("via %s: %v", via, err)
						}
						res.Body.Close()
						if res.StatusCode >= 200 {
							break
						}
						interim = append(interim, res.Header)
					}
					c.Close()
				}
				if len(interim) != 1 || interim[0].Get("Link") == "" {
					t.Errorf("via %s: 1xx %v, want one with its Link", via, interim)
					continue
				}
				for _, k := range hopFields {
					if v, ok := interim[0][k]; ok {
						t.Errorf("via %s: the 103 carries %s: %q", via, k, v)
					}
				}
			}
		})
	}
}

// TestParityHostStatusBelow100: a host whose status line has a code under
// 100 sent no HTTP response: the client gets a 502 problem, the same on
// the fast path (GET, HEAD) and through ReverseProxy (POST), over the
// lane, net/http's HTTP/1.1 server and HTTP/2 — not a 500 saying the
// gateway failed (a handler's WriteHeader with such a code panics).
func TestParityHostStatusBelow100(t *testing.T) {
	p := newParityEnv(t)
	for _, a := range []string{"status-000", "status-099"} {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			q := parityReq{name: method + " " + a, method: method, target: "/raw?a=" + a}
			if method == "POST" {
				q.body = "x"
			}
			t.Run(q.name, func(t *testing.T) {
				for _, via := range parityPaths {
					r := p.send(t, via, q)
					if r.Status != http.StatusBadGateway || r.Header.Get("Content-Type") != problem.ContentType {
						t.Errorf("via %s: %d %v %q, want a 502 problem", via, r.Status, r.Header, r.Body)
					}
				}
			})
		}
	}
}
