package cors

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestPreflight(t *testing.T) {
	p := Policy{Origins: []string{"https://a.example", "http://localhost:3000"}}
	cases := []struct {
		name    string
		policy  Policy
		origin  string
		method  string
		headers []string
		status  int
		allowH  string
		creds   string
	}{
		{"allowed", p, "https://a.example", "PUT", []string{"X-Custom, content-type"}, 204, "x-custom, content-type", ""},
		{"allowed no headers", p, "http://localhost:3000", "GET", nil, 204, "", ""},
		{"other origin", p, "https://b.example", "PUT", nil, 403, "", ""},
		{"port differs", p, "http://localhost:3001", "GET", nil, 403, "", ""},
		{"scheme differs", p, "http://a.example", "GET", nil, 403, "", ""},
		{"null origin", Policy{Origins: []string{"null"}}, "null", "GET", nil, 403, "", ""},
		{"default deny", Policy{}, "https://a.example", "GET", nil, 403, "", ""},
		{"bad method", p, "https://a.example", "G T", nil, 403, "", ""},
		{"bad header", p, "https://a.example", "GET", []string{"x y"}, 403, "", ""},
		{"credentials", Policy{Origins: p.Origins, AllowCredentials: true}, "https://a.example", "POST", nil, 204, "", "true"},
		{"fixed headers", Policy{Origins: p.Origins, AllowHeaders: []string{"X-Custom", "Content-Type"}}, "https://a.example", "POST", []string{"x-custom"}, 204, "X-Custom, Content-Type", ""},
		{"header not listed", Policy{Origins: p.Origins, AllowHeaders: []string{"X-Custom"}}, "https://a.example", "POST", []string{"x-other"}, 403, "", ""},
		// "*" is any header, as its writer meant (nginx and Express users
		// write it so): read literally it matched no request header, and
		// every preflight that asked for one was refused. The answer names
		// the headers asked for, since with credentials a browser reads
		// "*" in Access-Control-Allow-Headers literally.
		{"wildcard headers", Policy{Origins: p.Origins, AllowHeaders: []string{"*"}}, "https://a.example", "POST", []string{"X-Custom, content-type"}, 204, "x-custom, content-type", ""},
		{"wildcard headers with credentials", Policy{Origins: p.Origins, AllowHeaders: []string{"X-Other", "*"}, AllowCredentials: true}, "https://a.example", "POST", []string{"authorization"}, 204, "authorization", "true"},
		{"wildcard headers none asked", Policy{Origins: p.Origins, AllowHeaders: []string{"*"}}, "https://a.example", "POST", nil, 204, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("OPTIONS", "/x", nil)
			r.Header.Set("Origin", c.origin)
			r.Header.Set("Access-Control-Request-Method", c.method)
			for _, h := range c.headers {
				r.Header.Add("Access-Control-Request-Headers", h)
			}
			if !IsPreflight(r) {
				t.Fatal("not a preflight")
			}
			h := http.Header{}
			if got := c.policy.Preflight(r, h); got != c.status {
				t.Fatalf("status %d, want %d", got, c.status)
			}
			if c.status != 204 {
				if h.Get("Access-Control-Allow-Origin") != "" {
					t.Fatalf("refused preflight carries ACAO: %v", h)
				}
				return
			}
			want := map[string]string{
				"Access-Control-Allow-Origin":      c.origin,
				"Access-Control-Allow-Methods":     c.method,
				"Access-Control-Allow-Headers":     c.allowH,
				"Access-Control-Max-Age":           "600",
				"Access-Control-Allow-Credentials": c.creds,
			}
			for k, v := range want {
				if h.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, h.Get(k), v)
				}
			}
		})
	}
}

func TestRespond(t *testing.T) {
	p := Policy{Origins: []string{"https://a.example"}}
	h := http.Header{"Access-Control-Allow-Origin": {"*"}, "Access-Control-Allow-Credentials": {"true"}}
	p.Respond("https://b.example", h)
	if len(h) != 1 || h.Get("Vary") != "Origin" {
		t.Fatalf("disallowed origin: %v, want only Vary: Origin", h)
	}
	// Without an Origin too: a cache must not hand this answer to an
	// allowed origin. Without a list nothing depends on Origin.
	for _, c := range []struct {
		p    Policy
		vary string
	}{{p, "Origin"}, {Policy{}, ""}} {
		h = http.Header{"Access-Control-Allow-Origin": {"*"}}
		c.p.Respond("", h)
		if h.Get("Access-Control-Allow-Origin") != "" || h.Get("Vary") != c.vary {
			t.Fatalf("no Origin, origins %v: %v, want Vary %q", c.p.Origins, h, c.vary)
		}
	}
	h = http.Header{"Access-Control-Allow-Origin": {"*"}}
	p.Respond("https://a.example", h)
	if h.Get("Access-Control-Allow-Origin") != "https://a.example" || h.Get("Vary") != "Origin" || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("allowed origin: %v", h)
	}
	// The gateway's own fields are readable there, WWW-Authenticate too:
	// a 401 or 403 says why in it (RFC 6750).
	for _, f := range []string{"Retry-After", "X-RateLimit-Remaining", "WWW-Authenticate"} {
		if !strings.Contains(h.Get("Access-Control-Expose-Headers"), f) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", h.Get("Access-Control-Expose-Headers"), f)
		}
	}
	h = http.Header{}
	Policy{Origins: p.Origins, AllowCredentials: true}.Respond("https://a.example", h)
	if h.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("credentials: %v", h)
	}
	// Applied to an answer that already has it (a peer gateway's, or a
	// host's Vary), the policy adds nothing twice.
	h = http.Header{"Vary": {"Accept-Encoding, origin"}}
	p.Respond("https://a.example", h)
	once := h.Clone()
	p.Respond("https://a.example", h)
	if !reflect.DeepEqual(h, once) || len(h["Vary"]) != 1 {
		t.Fatalf("Respond twice: %v, once: %v", h, once)
	}
	if IsPreflight(httptest.NewRequest("OPTIONS", "/", nil)) {
		t.Fatal("OPTIONS without Access-Control-Request-Method is a preflight")
	}
}

func TestValidate(t *testing.T) {
	good := []string{"https://a.example", "http://localhost:8080", "https://[::1]:443"}
	bad := []string{"a.example", "https://a.example/", "https://*.example", "ftp://a", "https://u@a.example", "https://a.example?x", ""}
	for _, o := range good {
		if err := (Policy{Origins: []string{o}}).Validate(); err != nil {
			t.Errorf("%q: %v", o, err)
		}
	}
	for _, o := range bad {
		if err := (Policy{Origins: []string{o}}).Validate(); err == nil {
			t.Errorf("%q validated", o)
		}
	}
	if (Policy{AllowHeaders: []string{"x y"}}).Validate() == nil {
		t.Error("bad header validated")
	}
}
