package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// TestLaneServesPlainRequests: in serve mode the lane answers plain
// requests on the http listener (a PUT with a length included), net/http
// the rest (a chunked POST here) on the same connection, which then stays
// with net/http; DisableLane leaves everything to net/http.
func TestLaneServesPlainRequests(t *testing.T) {
	writerOf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%T", w)
	})
	for _, tc := range []struct {
		disable         bool
		wantGet, wantPo string
	}{
		{false, "*lane.writer", "*http.response"},
		{true, "*http.response", "*http.response"},
	} {
		t.Run(fmt.Sprintf("DisableLane=%v", tc.disable), func(t *testing.T) {
			e := start(t, Options{HTTPMode: ModeServe, Handler: writerOf, DisableLane: tc.disable})
			c := &http.Client{Transport: &http.Transport{}} // one keep-alive connection for all requests
			defer c.CloseIdleConnections()                  // its goroutines end before goleak looks
			for _, req := range []struct{ method, want string }{{"GET", tc.wantGet}, {"PUT", tc.wantGet}, {"POST", tc.wantPo}, {"GET", tc.wantPo}} {
				var body io.Reader
				switch req.method {
				case "PUT":
					body = strings.NewReader("a body") // a known length
				case "POST":
					body = io.MultiReader(strings.NewReader("a body")) // unknown: chunked
				}
				r, _ := http.NewRequest(req.method, "http://"+e.http+"/", body)
				r.Host = "app." + zone
				resp, err := c.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != req.want {
					t.Errorf("%s served through %s, want %s", req.method, b, req.want)
				}
			}
		})
	}
}

// TestLaneOverTLS: HTTP/1.1 over TLS takes the lane too, and r.TLS is set
// whichever server answers, the handed-over connection included; h2 goes
// to net/http.
func TestLaneOverTLS(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// The server's own writer, under the edge's HTTP/2 stall bound.
		inner := w
		for u, ok := inner.(interface{ Unwrap() http.ResponseWriter }); ok; u, ok = inner.(interface{ Unwrap() http.ResponseWriter }) {
			inner = u.Unwrap()
		}
		fmt.Fprintf(w, "%T tls=%v", inner, r.TLS != nil && r.TLS.HandshakeComplete)
	})
	e := start(t, Options{HTTPMode: ModeServe, Handler: h})
	h1 := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "app." + zone},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
	}}
	h2 := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: "app." + zone},
		ForceAttemptHTTP2: true,
	}}
	defer h1.CloseIdleConnections() // their goroutines end before goleak looks
	defer h2.CloseIdleConnections()
	for _, tc := range []struct {
		c      *http.Client
		method string
		want   string
	}{
		{h1, "GET", "*lane.writer tls=true"},
		{h1, "PUT", "*lane.writer tls=true"},
		{h1, "POST", "*http.response tls=true"},
		{h1, "GET", "*http.response tls=true"},     // the connection stays with net/http
		{h2, "GET", "*h2.responseWriter tls=true"}, // gatehouse's own HTTP/2 server
	} {
		var body io.Reader
		switch tc.method {
		case "PUT":
			body = strings.NewReader("a body")
		case "POST":
			body = io.MultiReader(strings.NewReader("a body"))
		}
		r, _ := http.NewRequest(tc.method, "https://"+e.https+"/", body)
		r.Host = "app." + zone
		resp, err := tc.c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want {
			t.Errorf("%s %s: %s, want %s", resp.Proto, tc.method, b, tc.want)
		}
	}
}

// TestLaneOverTLSAcrossWaits: a TLS connection outlives the lane's warm
// wait (a read that times out on the *tls.Conn) and its move to a fresh
// goroutine: the request after the pause is served on the same
// connection.
func TestLaneOverTLSAcrossWaits(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%T %s", w, r.URL.Path)
	})
	e := start(t, Options{HTTPMode: ModeServe, Handler: h})
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "app." + zone},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
	}}
	defer c.CloseIdleConnections()
	for i, pause := range []time.Duration{0, 0, 400 * time.Millisecond, 0} {
		time.Sleep(pause) // past the warm wait (250 ms): the wait moves goroutines
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }}
		path := fmt.Sprintf("/r%d", i)
		r, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "https://"+e.https+path, nil)
		r.Host = "app." + zone
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "*lane.writer " + path; string(b) != want {
			t.Errorf("request %d: %s, want %s", i, b, want)
		}
		if i > 0 && !reused {
			t.Errorf("request %d (after %v) came on a new connection, want the kept-alive one", i, pause)
		}
	}
}

// TestLaneDrainAnswersAMissedRequest: through the edge (whose counted
// connections reply as sock's do), a client that pipelines for the first
// time sends a request while the last is served, and the drain begins as
// the lane waits, replying, without having seen it. That request came
// before the drain and is answered, not cut with the connection.
func TestLaneDrainAnswersAMissedRequest(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			<-release
		}
		_, _ = io.WriteString(w, "answer "+r.URL.Path)
	})
	e := start(t, Options{HTTPMode: ModeServe, Handler: h, DrainTimeout: 5 * time.Second})
	c, err := net.Dial("tcp", e.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(p string) {
		t.Helper()
		if _, err := io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(p string) {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the answer for %s: %v", p, err)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != "answer "+p {
			t.Fatalf("the answer for %s: %d %q", p, res.StatusCode, b)
		}
	}
	for _, p := range []string{"/1", "/2"} {
		send(p)
		expect(p)
	}
	send("/held")
	time.Sleep(20 * time.Millisecond) // the held request is in the handler
	send("/during")
	time.Sleep(20 * time.Millisecond) // its bytes are in the socket
	release <- struct{}{}
	expect("/held")
	time.Sleep(20 * time.Millisecond) // the lane waits for what comes next
	e.cancel()                        // drain
	expect("/during")
}
