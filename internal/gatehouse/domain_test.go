package gatehouse

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A custom domain routes only once proven: the platform maps it, publishes
// the token as TXT in a zone this very gateway serves over DNS, asks for
// verification, and from then on the domain reaches the app.
func TestCustomDomainProvenByTXT(t *testing.T) {
	r := startWith(t, testConfig(t), func(g *Gatehouse) {
		g.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, g.Addrs().DNS)
		}}
	})
	if code, body := r.control(t, "PUT", "/api/v3/apps/shop", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	startHost(t, r, "shop-1", "shop", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "shop") }))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("shop")) == 1 }, "host not routable")

	code, body := r.control(t, "PUT", "/api/v3/domains/www.shop.example", `{"app":"shop"}`)
	var d struct {
		Token    string
		Verified bool
	}
	if code != 200 || json.Unmarshal([]byte(body), &d) != nil || d.Token == "" || d.Verified {
		t.Fatalf("map domain: %d %s", code, body)
	}
	if resp, _ := r.get(t, "www.shop.example", "/", nil); resp.StatusCode != 404 {
		t.Fatalf("unverified domain answered %d, want 404", resp.StatusCode)
	}
	// Not proven yet: no TXT record anywhere.
	if code, body := r.control(t, "POST", "/api/v3/domains/www.shop.example/verify", `{"method":"txt"}`); code < 400 {
		t.Fatalf("verify without a record: %d %s", code, body)
	}
	// The customer's zone happens to be served by this gateway's DNS.
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/shop.example", `{"gateways":["127.0.0.1"],"ttl":5}`); code != 200 {
		t.Fatalf("put zone: %d %s", code, body)
	}
	rec := fmt.Sprintf(`{"ttl":5,"values":[%q]}`, d.Token)
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/shop.example/records/_gatehouse-challenge.www.shop.example/TXT", rec); code != 200 {
		t.Fatalf("put record: %d %s", code, body)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		code, _ := r.control(t, "POST", "/api/v3/domains/www.shop.example/verify", `{"method":"txt"}`)
		return code == 200
	}, "txt proof never passed")
	testutil.WaitFor(t, 2*time.Second, func() bool {
		resp, body := r.get(t, "www.shop.example", "/", nil)
		return resp.StatusCode == 200 && body == "shop"
	}, "verified domain does not route")
}
