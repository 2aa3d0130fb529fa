package api

import (
	"net/http"
	"strings"
	"testing"
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
