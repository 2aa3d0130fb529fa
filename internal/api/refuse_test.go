package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestZoneRefusals: a zone that is a public suffix, and a gateway address
// no client can be sent to, answer 400 naming what is wrong and store
// nothing; the zones and addresses a private network or a test uses
// (loopback included, the demo's) are stored.
func TestZoneRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, c := range []struct{ zone, body, detail string }{
		{"com", `{"gateways":["192.0.2.1"]}`, `zone "com" is a public suffix`},
		{"co.uk", `{"gateways":["192.0.2.1"]}`, `zone "co.uk" is a public suffix`},
		{"apps.example.com", `{"gateways":["255.255.255.255"]}`, "gateways[0]: must be an address clients can reach the gateways at, not 255.255.255.255"},
		{"apps.example.com", `{"gateways":["192.0.2.1","::ffff:255.255.255.255"]}`, "gateways[1]: must be an address clients can reach the gateways at, not 255.255.255.255"},
		{"apps.example.com", `{"gateways":["0.1.2.3"]}`, "gateways[0]: must be an address clients can reach the gateways at, not 0.1.2.3"},
	} {
		before := e.snapshot()
		r := e.ok("PUT", "/api/v3/dns/zones/"+c.zone, c.body, 400)
		if d := problemOf(t, r).Detail; !strings.Contains(d, c.detail) {
			t.Errorf("PUT zone %s %s: detail %q, want %q", c.zone, c.body, d, c.detail)
		}
		if after := e.snapshot(); after != before {
			t.Errorf("PUT zone %s %s changed the store", c.zone, c.body)
		}
	}
	for _, c := range []struct{ zone, gw string }{
		{"localhost", "127.0.0.1"}, {"test", "::1"}, {"internal", "10.0.0.1"}, {"home.arpa", "192.168.1.255"},
		{"shop.example.co.uk", "192.0.2.1"}, {"herokuapp.com", "2001:db8::1"},
	} {
		e.ok("PUT", "/api/v3/dns/zones/"+c.zone, `{"gateways":["`+c.gw+`"]}`, 200)
	}
}

// TestBodyByteOrderMark: a body that starts with a UTF-8 byte order mark
// (PowerShell's and Notepad's UTF-8 files do) is read as the JSON after
// it, which RFC 8259 §8.1 lets a parser do: it was refused with
// "invalid character 'ï' looking for beginning of value", naming a
// character the client never wrote. A mark anywhere else is still no
// JSON.
func TestBodyByteOrderMark(t *testing.T) {
	e := newEnv(t, nil)
	const bom = "\xef\xbb\xbf"
	r := e.ok("PUT", "/api/v3/apps/shop", bom+`{"status":"suspended"}`, 200)
	if !strings.Contains(string(r.body), `"status":"suspended"`) {
		t.Errorf("PUT with a BOM: %s, want the app suspended", r.body)
	}
	e.ok("PUT", "/api/v3/apps/blog", bom, 200) // an empty body, marked
	for _, body := range []string{`{"status":` + bom + `"suspended"}`, bom + bom + `{}`, `{}` + bom} {
		r := e.do("PUT", "/api/v3/apps/shop", token, body)
		if r.status != http.StatusBadRequest {
			t.Errorf("PUT %q: %d %s, want 400", body, r.status, r.body)
		}
	}
	if r := e.ok("GET", "/api/v3/apps/shop", nil, 200); !strings.Contains(string(r.body), `"status":"suspended"`) {
		t.Errorf("after the refused PUTs: %s", r.body)
	}
}

// TestNoBodyOnReadOrDelete: a control GET, HEAD or DELETE that carries a
// body answers 400 and changes nothing: the API reads no such body, so
// what it says was ignored, as a query field not taken was (DESIGN §7) -
// a DELETE's {"cascade": false} deleted, a GET's {"limit": 1} answered
// the whole list. A body of length 0, the way clients send none, is no
// body; so is a chunked body that ends at once.
func TestNoBodyOnReadOrDelete(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	before := e.snapshot()
	send := func(method, path string, body io.Reader) int {
		req, err := http.NewRequest(method, e.srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode == http.StatusBadRequest && method != "HEAD" && !strings.Contains(string(b), "no body") {
			t.Errorf("%s %s: detail %s does not say it takes no body", method, path, b)
		}
		return res.StatusCode
	}
	chunked := func(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) } // no length: sent chunked
	for _, c := range []struct {
		method, path string
		body         io.Reader
	}{
		{"DELETE", "/api/v3/apps/shop", strings.NewReader(`{"cascade":false}`)},
		{"DELETE", "/api/v3/hosts/keys/web-1", chunked(`{"force":false}`)},
		{"DELETE", "/api/v3/dns/zones/apps.example.com/records/www/A", strings.NewReader(" ")},
		{"GET", "/api/v3/apps", strings.NewReader(`{"limit":1}`)},
		{"GET", "/api/v3/apps/shop", chunked(`{}`)},
		{"HEAD", "/api/v3/domains/shop.example.org", strings.NewReader(`{}`)},
	} {
		if got := send(c.method, c.path, c.body); got != http.StatusBadRequest {
			t.Errorf("%s %s with a body: %d, want 400", c.method, c.path, got)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused request changed the store\nbefore %s\nafter  %s", before, after)
	}
	for _, c := range []struct {
		method, path string
		body         io.Reader
		want         int
	}{
		{"GET", "/api/v3/apps", strings.NewReader(""), 200},
		{"GET", "/api/v3/apps/shop", chunked(""), 200},
		{"DELETE", "/api/v3/hosts/keys/web-1", strings.NewReader(""), 204},
		{"DELETE", "/api/v3/dns/zones/apps.example.com/records/www/A", nil, 204},
	} {
		if got := send(c.method, c.path, c.body); got != c.want {
			t.Errorf("%s %s without a body: %d, want %d", c.method, c.path, got, c.want)
		}
	}
}

// TestOversizedBodyRefusedBeforeSent: a write whose Content-Length is
// past the 1 MiB bound, sent with Expect: 100-continue, answers 413 at
// once, without 100 Continue: the client is not asked to upload a body
// that can only be refused (it was, 1 MiB of it read before the 413).
// The batch resolve route likewise. A body at the bound is still read.
func TestOversizedBodyRefusedBeforeSent(t *testing.T) {
	e, _ := resolveEnv(t, ResolveLimits{})
	for _, c := range []struct{ method, path string }{
		{"PUT", "/api/v3/apps/shop"},
		{"POST", "/api/v3/domains/shop.example.org/verify"},
		{"POST", "/api/v3/dns/resolve/batch"},
	} {
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
			c.method, c.path, token, maxBody+1)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s with Content-Length %d: first answer %d, want 413 without 100 Continue", c.method, c.path, maxBody+1, res.StatusCode)
		}
		conn.Close()
	}
	if r := e.do("PUT", "/api/v3/apps/shop", token, `{}`+strings.Repeat(" ", maxBody-2)); r.status != 200 {
		t.Errorf("a body of exactly %d bytes: %d %s", maxBody, r.status, r.body)
	}
}

// TestEarlyAnswerAsksForNoBody: a write refused before its body is read
// (a stale If-Match, a query field not taken), sent with Expect:
// 100-continue, gets its answer without the body being sent, on a plain
// net/http server: the API caps the body on a copy of the request, not
// on net/http's own, which then sees a body it never asked for and
// closes the connection rather than wait for up to 256 KiB of it before
// the answer (the API's cap on its request made net/http read on until
// the client gave up waiting for 100 Continue and sent the body).
func TestEarlyAnswerAsksForNoBody(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	for _, c := range []struct {
		target, ifMatch string
		want            int
	}{
		{"/api/v3/apps/shop", `"stale"`, http.StatusPreconditionFailed},
		{"/api/v3/apps/shop?dryRun=1", "", http.StatusBadRequest},
	} {
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// a bound for the failure only: the answer comes at once or never
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		head := "PUT " + c.target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n"
		if c.ifMatch != "" {
			head += "If-Match: " + c.ifMatch + "\r\n"
		}
		if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Errorf("PUT %s with Expect: 100-continue and no body sent: %v, want %d", c.target, err, c.want)
			continue
		}
		if res.StatusCode != c.want || !res.Close {
			t.Errorf("PUT %s with Expect: 100-continue: %d (close %v), want %d and the connection closed", c.target, res.StatusCode, res.Close, c.want)
		}
	}
}
