package edge

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// TestLimitAnswersAreProblems: the 414 and 431 the edge answers itself
// are RFC 9457 problems (DESIGN §2: "Errors the gateway answers itself are
// RFC 9457 application/problem+json bodies"), the same on the three paths
// a request can take: the lane, net/http HTTP/1.1, and HTTP/2.
func TestLimitAnswersAreProblems(t *testing.T) {
	long := "/" + strings.Repeat("a", 9<<10)
	over := head(64<<10 + 1<<10) // over MaxHeaderBytes, within net/http's slack: the edge answers
	cases := []struct {
		name, via string
		req       string // raw HTTP/1.1 head; for h2 only the target is used
		target    string
		want      int
	}{
		{"line over 8k", "http lane", "GET " + long + " HTTP/1.1\r\nHost: w\r\n\r\n", "", 414},
		{"line over 8k", "http net/http", "GET " + long + " HTTP/1.1\r\nHost: w\r\n\r\n", "", 414},
		{"line over 8k", "https h1", "GET " + long + " HTTP/1.1\r\nHost: w\r\n\r\n", "", 414},
		{"line over 8k", "https h2", "", long, 414},
		{"header block over 64k", "http lane", over, "", 431},
		{"header block over 64k", "http net/http", over, "", 431},
		{"header block over 64k", "https h1", over, "", 431},
	}
	lane := start(t, Options{HTTPMode: ModeServe})
	plain := start(t, Options{HTTPMode: ModeServe, DisableLane: true})
	for _, tc := range cases {
		t.Run(tc.name+" via "+tc.via, func(t *testing.T) {
			var res *http.Response
			var err error
			switch tc.via {
			case "http lane", "http net/http":
				addr := lane.http
				if tc.via == "http net/http" {
					addr = plain.http
				}
				var c net.Conn
				if c, err = net.Dial("tcp", addr); err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				go func() { _, _ = io.WriteString(c, tc.req) }()
				res, err = http.ReadResponse(bufio.NewReader(c), nil)
			case "https h1":
				var c *tls.Conn
				if c, err = dialTLS(t, lane.https, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}); err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				go func() { _, _ = io.WriteString(c, tc.req) }()
				res, err = http.ReadResponse(bufio.NewReader(c), nil)
			case "https h2":
				tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
				defer tr.CloseIdleConnections()
				res, err = (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + lane.https + tc.target)
				if err == nil && res.ProtoMajor != 2 {
					t.Fatalf("not HTTP/2: %s", res.Proto)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.want)
			}
			if ct := res.Header.Get("Content-Type"); ct != problem.ContentType {
				t.Errorf("Content-Type %q, want %q; body %q", ct, problem.ContentType, b)
			}
			var p problem.Problem
			if err := json.Unmarshal(b, &p); err != nil || p.Status != tc.want || p.Title == "" {
				t.Errorf("body %q is not a %d problem: %v", b, tc.want, err)
			}
		})
	}
}
