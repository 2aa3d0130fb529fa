package verify_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

const tok = "Zk3vQ9x_aB-7cD2eF4gH1w" // the shape the control API mints

// startDNS serves zones with the project's own authoritative server on a
// loopback port and returns a Go resolver that asks only it.
func startDNS(t *testing.T, zones []dns.Zone) *net.Resolver {
	t.Helper()
	s, err := dns.New(dns.Options{Addr: "127.0.0.1:0", Zones: func() []dns.Zone { return zones }})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "dns serve", func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	return resolverAt(pc.LocalAddr().String())
}

func resolverAt(addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

var proofZones = []dns.Zone{
	{
		Name:     "shop.example",
		Gateways: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		Records: []dns.Record{
			{Name: "_gatehouse-challenge.shop.example", Type: "TXT", Values: []string{"v=spf1 -all", tok}},
			{Name: "_gatehouse-challenge.wrong.shop.example", Type: "TXT", Values: []string{"not-the-token", tok + "x"}},
			{Name: "www.shop.example", Type: "CNAME", Values: []string{"shop.apps.test"}},
			{Name: "blog.shop.example", Type: "CNAME", Values: []string{"blog.apps.test"}},
			{Name: "away.shop.example", Type: "CNAME", Values: []string{"shop.elsewhere.test"}},
			{Name: "deep.shop.example", Type: "CNAME", Values: []string{"x.shop.apps.test"}},
		},
	},
	{Name: "apps.test", Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
}

func TestDomainDNS(t *testing.T) {
	res := startDNS(t, proofZones)
	opts := verify.DomainOptions{Resolver: res, Zones: func() []string { return []string{"other.test", "apps.test."} }, Timeout: 3 * time.Second}
	dead := deadUDP(t)
	tests := []struct {
		name   string
		opts   verify.DomainOptions
		claim  verify.DomainClaim
		method string
		want   error
	}{
		{"txt holds the token", opts, verify.DomainClaim{"shop.example", "shop", tok}, "txt", nil},
		{"txt, name in any case with a trailing dot", opts, verify.DomainClaim{"Shop.Example.", "shop", tok}, "txt", nil},
		{"txt, another mapping's token", opts, verify.DomainClaim{"shop.example", "shop", "AAAAAAAAAAAAAAAAAAAAAA"}, "txt", verify.ErrNotProven},
		{"txt, wrong values only", opts, verify.DomainClaim{"wrong.shop.example", "shop", tok}, "txt", verify.ErrNotProven},
		{"txt, no record (NODATA)", opts, verify.DomainClaim{"none.shop.example", "shop", tok}, "txt", verify.ErrNotProven},
		{"txt, server refuses the zone", opts, verify.DomainClaim{"shop.nowhere", "shop", tok}, "txt", verify.ErrDomainUnreachable},
		{"txt, no DNS server", verify.DomainOptions{Resolver: resolverAt(dead), Timeout: 2 * time.Second}, verify.DomainClaim{"shop.example", "shop", tok}, "txt", verify.ErrDomainUnreachable},

		{"cname to {app}.{zone}", opts, verify.DomainClaim{"www.shop.example", "shop", tok}, "cname", nil},
		{"cname, to another app", opts, verify.DomainClaim{"blog.shop.example", "shop", tok}, "cname", verify.ErrNotProven},
		{"cname, to another zone", opts, verify.DomainClaim{"away.shop.example", "shop", tok}, "cname", verify.ErrNotProven},
		{"cname, below the app name", opts, verify.DomainClaim{"deep.shop.example", "shop", tok}, "cname", verify.ErrNotProven},
		{"cname, none (apex A)", opts, verify.DomainClaim{"shop.example", "shop", tok}, "cname", verify.ErrNotProven},
		{"cname, the app's own name is no proof", opts, verify.DomainClaim{"shop.apps.test", "shop", tok}, "cname", verify.ErrNotProven},
		{"cname, no zones served", verify.DomainOptions{Resolver: res}, verify.DomainClaim{"www.shop.example", "shop", tok}, "cname", verify.ErrNotProven},
		{"cname, bad app", opts, verify.DomainClaim{"www.shop.example", "Shop!", tok}, "cname", verify.ErrBadDomain},
		{"cname, refused", opts, verify.DomainClaim{"www.nowhere", "shop", tok}, "cname", verify.ErrDomainUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verify.Domain(t.Context(), tt.opts, tt.claim, tt.method)
			checkErr(t, err, tt.want)
		})
	}
}

// deadUDP returns a loopback UDP address nobody listens on.
func deadUDP(t *testing.T) string { return testutil.FreeUDPAddr(t) }

var sentinels = []error{verify.ErrBadDomain, verify.ErrUnknownMethod, verify.ErrNotProven, verify.ErrDomainUnreachable}

func checkErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("err = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("err = %v wraps %d sentinels, want exactly 1", err, n)
	}
}

// challengeSite is one loopback HTTP server standing in for every
// customer domain in the tests: it behaves by the request's Host.
type challengeSite struct {
	mu   sync.Mutex
	seen []string // "METHOD host path" of each request
}

func (c *challengeSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.seen = append(c.seen, r.Method+" "+r.Host+" "+r.URL.RequestURI())
	c.mu.Unlock()
	want := "/.well-known/gatehouse-challenge/" + tok
	switch r.Host {
	case "good.example", "good.example:80":
		if r.URL.Path != want || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, tok+"\r\n")
	case "wrong.example":
		io.WriteString(w, "AAAAAAAAAAAAAAAAAAAAAA")
	case "prefix.example":
		io.WriteString(w, tok+tok)
	case "missing.example":
		http.NotFound(w, r)
	case "broken.example":
		http.Error(w, tok, http.StatusInternalServerError) // the token, but not a 200
	case "big.example":
		io.WriteString(w, tok+strings.Repeat(" ", 600)) // trims to the token, but over the cap
	case "away.example":
		http.Redirect(w, r, "http://good.example"+want, http.StatusFound)
	case "port.example":
		http.Redirect(w, r, "http://port.example:8080/moved", http.StatusFound)
	case "moved.example":
		if r.URL.Path == "/moved" {
			io.WriteString(w, tok)
			return
		}
		http.Redirect(w, r, "/moved", http.StatusMovedPermanently)
	case "loop.example":
		http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
	case "slow.example":
		<-r.Context().Done()
	default:
		http.Error(w, "unknown host", http.StatusMisdirectedRequest)
	}
}

// clientTo returns the default domain client with only its dialer
// changed: {domain}:80 goes to addr (test and development use only).
func clientTo(addr string) *http.Client {
	c := verify.NewDomainClient()
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, hostport string) (net.Conn, error) {
		if _, port, _ := net.SplitHostPort(hostport); port != "80" {
			return nil, errors.New("test dialer: only port 80 is mapped, got " + hostport)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return c
}

func TestDomainHTTP(t *testing.T) {
	site := &challengeSite{}
	srv := httptest.NewServer(site)
	defer srv.Close()
	client := clientTo(srv.Listener.Addr().String())
	opts := verify.DomainOptions{HTTPClient: client, Timeout: 2 * time.Second}

	deadAddr := testutil.RefusedAddr(t)

	tests := []struct {
		name   string
		opts   verify.DomainOptions
		domain string
		want   error
	}{
		{"serves the token", opts, "good.example", nil},
		{"name with a trailing dot", opts, "GOOD.example.", nil},
		{"same-host redirect followed", opts, "moved.example", nil},
		{"wrong body", opts, "wrong.example", verify.ErrNotProven},
		{"token twice", opts, "prefix.example", verify.ErrNotProven},
		{"404", opts, "missing.example", verify.ErrNotProven},
		{"500 with the token", opts, "broken.example", verify.ErrNotProven},
		{"oversized body", opts, "big.example", verify.ErrNotProven},
		{"redirect to another host not followed", opts, "away.example", verify.ErrNotProven},
		{"redirect to another port not followed", opts, "port.example", verify.ErrNotProven},
		{"redirect loop stops", opts, "loop.example", verify.ErrNotProven},
		{"timeout", verify.DomainOptions{HTTPClient: client, Timeout: 300 * time.Millisecond}, "slow.example", verify.ErrDomainUnreachable},
		{"nothing listening", verify.DomainOptions{HTTPClient: clientTo(deadAddr)}, "good.example", verify.ErrDomainUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verify.Domain(t.Context(), tt.opts, verify.DomainClaim{tt.domain, "shop", tok}, "http")
			checkErr(t, err, tt.want)
		})
	}

	site.mu.Lock()
	defer site.mu.Unlock()
	for _, s := range site.seen {
		if !strings.HasPrefix(s, "GET ") {
			t.Errorf("request %q: the proof only ever GETs", s)
		}
		if strings.HasPrefix(s, "GET good.example") && s != "GET good.example /.well-known/gatehouse-challenge/"+tok {
			t.Errorf("request %q: not exactly the challenge URL (or a redirect was followed to another host)", s)
		}
	}
	if n := count(site.seen, "GET loop.example"); n != 4 {
		t.Errorf("loop.example asked %d times, want 4 (the request and 3 redirects)", n)
	}
	if n := count(site.seen, "GET good.example"); n != 2 {
		t.Errorf("good.example asked %d times, want 2 (its own two cases; no redirect leads there)", n)
	}
	if client.CheckRedirect != nil {
		t.Error("Domain changed the caller's client")
	}
}

func count(seen []string, prefix string) int {
	n := 0
	for _, s := range seen {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// Claims that are not well formed are refused before anything is asked;
// the resolver and client here would fail the test if used.
func TestDomainBadClaims(t *testing.T) {
	opts := verify.DomainOptions{Resolver: panicResolver{}, HTTPClient: &http.Client{Transport: panicTransport{}}, Zones: func() []string { return []string{"apps.test"} }}
	tests := []struct {
		name   string
		claim  verify.DomainClaim
		method string
		want   error
	}{
		{"manual is the API's", verify.DomainClaim{"shop.example", "shop", tok}, "manual", verify.ErrUnknownMethod},
		{"upper-case method", verify.DomainClaim{"shop.example", "shop", tok}, "TXT", verify.ErrUnknownMethod},
		{"empty method", verify.DomainClaim{"shop.example", "shop", tok}, "", verify.ErrUnknownMethod},
		{"dns-01", verify.DomainClaim{"shop.example", "shop", tok}, "dns-01", verify.ErrUnknownMethod},
	}
	for _, m := range []string{"txt", "cname", "http"} {
		for _, d := range []string{"127.0.0.1", "10.0.0.1.", "::1", "[::1]", "[::1]:80", "shop.example:80", "localhost", "", ".", "a..b", "-a.example", "a_b.example", "shop.example/x", "shop.example?x", "user@shop.example", "ünï.example", strings.Repeat("a.", 127) + "example"} {
			tests = append(tests, struct {
				name   string
				claim  verify.DomainClaim
				method string
				want   error
			}{m + " " + d, verify.DomainClaim{d, "shop", tok}, m, verify.ErrBadDomain})
		}
		for _, token := range []string{"", "a/b", "../x", "a b", "a%2Fb", strings.Repeat("a", 129)} {
			tests = append(tests, struct {
				name   string
				claim  verify.DomainClaim
				method string
				want   error
			}{m + " token " + token, verify.DomainClaim{"shop.example", "shop", token}, m, verify.ErrBadDomain})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, verify.Domain(t.Context(), opts, tt.claim, tt.method), tt.want)
		})
	}
}

type panicResolver struct{}

func (panicResolver) LookupTXT(context.Context, string) ([]string, error) {
	panic("resolver used for a malformed claim")
}

func (panicResolver) LookupCNAME(context.Context, string) (string, error) {
	panic("resolver used for a malformed claim")
}

type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) {
	panic("client used for a malformed claim")
}

// fixedResolver answers every lookup with the same values: for fuzzing
// what a DNS server may send, which the real resolver above cannot vary
// byte by byte.
type fixedResolver struct {
	txt   []string
	cname string
}

func (f fixedResolver) LookupTXT(context.Context, string) ([]string, error) { return f.txt, nil }
func (f fixedResolver) LookupCNAME(context.Context, string) (string, error) { return f.cname, nil }

// The records and names come from the internet (a customer's DNS) and the
// API: whatever they hold, Domain never panics, wraps one sentinel, and
// passes exactly when the proof holds.
func FuzzDomainProof(f *testing.F) {
	f.Add("shop.example", "shop", tok, tok, "shop.apps.test.")
	f.Add("shop.example", "shop", tok, " "+tok+"\n", "SHOP.apps.test")
	f.Add("127.0.0.1", "shop", tok, tok, "shop.apps.test")
	f.Add("shop.example", "shop", "", "", "shop.example.")
	f.Add("a.b", "x-y", "t", "tt", "x-y.apps.test..")
	f.Fuzz(func(t *testing.T, domain, app, token, txt, cname string) {
		opts := verify.DomainOptions{Resolver: fixedResolver{[]string{"other", txt}, cname}, Zones: func() []string { return []string{"apps.test"} }}
		claim := verify.DomainClaim{domain, app, token}
		errTXT := verify.Domain(context.Background(), opts, claim, "txt")
		errCNAME := verify.Domain(context.Background(), opts, claim, "cname")
		for _, err := range []error{errTXT, errCNAME} {
			if err == nil {
				continue
			}
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%v wraps %d sentinels", err, n)
			}
		}
		if errors.Is(errTXT, verify.ErrBadDomain) {
			return
		}
		if (errTXT == nil) != (strings.TrimSpace(txt) == token || token == "other") {
			t.Fatalf("txt %q, token %q: err = %v", txt, token, errTXT)
		}
		if errors.Is(errCNAME, verify.ErrBadDomain) {
			return
		}
		target := strings.ToLower(strings.TrimSuffix(cname, "."))
		self := target == strings.ToLower(strings.TrimSuffix(domain, "."))
		if (errCNAME == nil) != (target == app+".apps.test" && !self) {
			t.Fatalf("cname %q, app %q: err = %v", cname, app, errCNAME)
		}
	})
}
