package gatehouse

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// The gateway's own refusals over HTTP/2 are the problem+json answers
// HTTP/1.1 gets on the same listener: status, fields and body alike.
func (e *h2Env) testRefusals(t *testing.T) {
	other, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": "idp", "sub": "alice", "aud": []string{"shop"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(e.issuer)
	if err != nil {
		t.Fatal(err)
	}
	// tight allows one request a minute: this one spends it.
	h1, _ := e.client(t, "tight.test.local", "http/1.1")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	res := roundTrip(t, h1, newReq(t, ctx, "GET", "https://tight.test.local/", nil))
	res.Body.Close()
	if res.StatusCode == http.StatusTooManyRequests {
		t.Fatal("the first request to tight was already over its limit")
	}
	for _, tc := range []struct {
		name, sni, host, path, token string
		status                       int
	}{
		{"unknown host", "nope.test.local", "nope.test.local", "/", "", 404},
		{"passthrough app on a terminated connection", "web.test.local", "vault.test.local", "/", "", 421},
		{"over the rate limit", "tight.test.local", "tight.test.local", "/", "", 429},
		{"no token", "locked.test.local", "locked.test.local", "/", "", 401},
		{"token for another app", "locked.test.local", "locked.test.local", "/", other, 403},
		{"denied by policy", "fenced.test.local", "fenced.test.local", "/admin/users", "", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]parityRes
			for i, proto := range []string{"h2", "http/1.1"} {
				tr, _ := e.client(t, tc.sni, proto)
				req := newReq(t, ctx, "GET", "https://"+tc.sni+tc.path, nil)
				req.Host = tc.host
				req.Header.Set("User-Agent", "h2e2e/1")
				if tc.token != "" {
					req.Header.Set("Authorization", "Bearer "+tc.token)
				}
				res := roundTrip(t, tr, req)
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil {
					t.Fatalf("%s: reading the body: %v", proto, err)
				}
				var p problem.Problem
				if res.StatusCode != tc.status || res.Header.Get("Content-Type") != problem.ContentType ||
					jsonStrict(b, &p) != nil || p.Status != tc.status || p.Title != http.StatusText(tc.status) {
					t.Errorf("%s: %d %v %q, want a %d problem", proto, res.StatusCode, res.Header, b, tc.status)
				}
				got[i] = parityRes{Status: res.StatusCode, Header: res.Header, Body: string(b)}
				got[i].normalize()
				// The wait left may tick between the two requests.
				if got[i].Header.Get("Retry-After") != "" {
					got[i].Header.Set("Retry-After", "(present)")
				}
				got[i].Body = retryAfterSeconds.ReplaceAllString(got[i].Body, "retry after (n) s")
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
				t.Errorf("HTTP/2 and HTTP/1.1 differ:\nh2:       %+v\nhttp/1.1: %+v", got[0], got[1])
			}
		})
	}
}

var retryAfterSeconds = regexp.MustCompile(`retry after \d+ s`)

// A header list over listeners.max_header_bytes (64 KiB) is refused with
// the 431 problem HTTP/1.1 gets for a head over it. The HTTP/2 request is
// sent frame by frame: Go's transport will not send a header list over
// the server's advertised limit.
func (e *h2Env) testHeaderListTooLarge(t *testing.T) {
	var fields [][2]string
	for i := range 68 {
		// Pseudo-random values: HPACK cannot shrink the list much.
		v, _ := io.ReadAll(pseudoRandom(uint64(100+i), 500))
		fields = append(fields, [2]string{"x-pad-" + strconv.Itoa(i), hex.EncodeToString(v)})
	}
	c := dialRawH2(t, e.r.g.Addrs().HTTPS, "web.test.local")
	c.open(t, 1, "GET", "/ok", true, append(fields, [2]string{"user-agent", "h2e2e/1"})...)
	c.until(t, "the answer", func() bool { return c.ended[1] || c.reset[1] })
	h2 := parityRes{Header: c.header[1], Body: string(c.body[1])}
	h2.Status, _ = strconv.Atoi(c.status[1])

	tr, _ := e.client(t, "web.test.local", "http/1.1")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	req := newReq(t, ctx, "GET", "https://web.test.local/ok", nil)
	req.Header.Set("User-Agent", "h2e2e/1")
	for _, f := range fields {
		req.Header.Set(f[0], f[1])
	}
	res := roundTrip(t, tr, req)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	h1 := parityRes{Status: res.StatusCode, Header: res.Header, Body: string(b)}
	h1.Header.Del("Connection") // HTTP/1.1 closes after a head it could not read whole
	if !e.fast {
		// net/http's HTTP/2 server (fast_path off) answers an oversized
		// header list with its own handler, before the gateway's runs:
		// a 431 in HTML, not the problem (docs/config.md says so). The
		// status is what it shares with the others.
		if h2.Status != http.StatusRequestHeaderFieldsTooLarge || h1.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("got %d over HTTP/2 and %d over HTTP/1.1, want 431 for both", h2.Status, h1.Status)
		}
		return
	}
	for _, r := range []*parityRes{&h2, &h1} {
		if r.Status != http.StatusRequestHeaderFieldsTooLarge || r.Header.Get("Content-Type") != problem.ContentType {
			t.Errorf("got %d %q %q, want a 431 problem", r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		r.normalize()
	}
	if fmt.Sprint(h2) != fmt.Sprint(h1) {
		t.Errorf("HTTP/2 and HTTP/1.1 differ:\nh2:       %+v\nhttp/1.1: %+v", h2, h1)
	}
}

// "OPTIONS *" asks about the server, not a resource. It goes through the
// chain like any request, on every path (HTTP/2; HTTP/1.1 read by the
// lane and by net/http, which with fast_path on gets a connection the
// lane hands off; with it off, net/http alone): a known app's is answered
// by the gateway itself, 200 with Allow, no body and the headers every
// answer carries, reaches no host, and is counted; an unknown host's gets
// the unknown-host 404; "GET *" a 400. net/http's own answer, which these paths gave
// before, had none of the gateway's headers and was neither logged nor
// counted.
func (e *h2Env) testOptionsStar(t *testing.T) {
	before := e.hits.Load()
	metric := func(series string) float64 {
		_, m := mgmtGet(t, e.r.g.Addrs().Management, "/metrics")
		for l := range strings.Lines(m) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), series+" "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		return 0
	}
	const counted = `gatehouse_http_requests_total{app="web",code="2xx",method="OPTIONS"}`
	countedBefore := metric(counted)

	c := dialRawH2(t, e.r.g.Addrs().HTTPS, "web.test.local")
	c.open(t, 1, "OPTIONS", "*", true)
	c.until(t, "the answer", func() bool { return c.ended[1] || c.reset[1] })
	h2 := parityRes{Header: c.header[1], Body: string(c.body[1])}
	h2.Status, _ = strconv.Atoi(c.status[1])

	h1 := func(head string) parityRes {
		tc, err := tls.Dial("tcp", e.r.g.Addrs().HTTPS, &tls.Config{ServerName: "web.test.local", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		_ = tc.SetDeadline(time.Now().Add(h2Wait))
		io.WriteString(tc, head)
		return readRaw(t, bufio.NewReader(tc), "OPTIONS")
	}
	const handoffs = `gatehouse_fast_path_handoffs_total{reason="target"}`
	handedBefore := metric(handoffs)
	lane := h1("OPTIONS * HTTP/1.1\r\nHost: web.test.local\r\n\r\n")
	if n := metric(handoffs) - handedBefore; n != 0 {
		t.Errorf("the lane handed off %v OPTIONS * requests, want it to serve them", n)
	}
	// TE hands the lane's connection to net/http (fast_path on).
	handed := h1("OPTIONS * HTTP/1.1\r\nHost: web.test.local\r\nTE: trailers\r\n\r\n")
	for name, r := range map[string]*parityRes{"h2": &h2, "http/1.1": &lane, "http/1.1 handed to net/http": &handed} {
		if r.Status != 200 || r.Body != "" || r.Header.Get("Allow") == "" ||
			r.Header.Get("X-Request-Id") == "" || r.Header.Get("X-Gatehouse-Cluster") == "" {
			t.Errorf("%s: %d %q %v, want 200, Allow, X-Request-Id, X-Gatehouse-Cluster and no body", name, r.Status, r.Body, r.Header)
		}
		r.normalize()
	}
	for name, r := range map[string]parityRes{"http/1.1": lane, "http/1.1 handed to net/http": handed} {
		if r.Header.Get("Content-Length") != "0" {
			t.Errorf("%s: Content-Length %q, want 0", name, r.Header.Get("Content-Length"))
		}
	}
	if fmt.Sprint(h2) != fmt.Sprint(lane) || fmt.Sprint(handed) != fmt.Sprint(lane) {
		t.Errorf("the paths differ:\nh2:       %+v\nhttp/1.1: %+v\nhanded:   %+v", h2, lane, handed)
	}
	// Only OPTIONS may ask in asterisk form; net/http reads any method's.
	get := h1("GET * HTTP/1.1\r\nHost: web.test.local\r\n\r\n")
	if get.Status != http.StatusBadRequest || get.Header.Get("Content-Type") != problem.ContentType || get.Header.Get("X-Request-Id") == "" {
		t.Errorf("GET *: %d %v %q, want a 400 problem", get.Status, get.Header, get.Body)
	}
	if n := e.hits.Load() - before; n != 0 {
		t.Errorf("the host saw %d requests", n)
	}
	if n := metric(counted) - countedBefore; n != 3 {
		t.Errorf("counted %v OPTIONS answers for web, want 3", n)
	}

	unknown := h1("OPTIONS * HTTP/1.1\r\nHost: nowhere.test.local\r\n\r\n")
	if unknown.Status != http.StatusNotFound || unknown.Header.Get("Content-Type") != problem.ContentType || unknown.Header.Get("X-Request-Id") == "" {
		t.Errorf("unknown host: %d %v %q, want the unknown-host 404 problem", unknown.Status, unknown.Header, unknown.Body)
	}
}

// jsonStrict decodes b into v, refusing fields v does not have: a problem
// carries type, title, status and detail, and nothing else.
func jsonStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
