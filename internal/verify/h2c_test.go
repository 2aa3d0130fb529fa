package verify_test

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

// An h2c host is reached the way the gateway proxies to it: HTTP/2 with
// prior knowledge over plain TCP. A backend that speaks only that (as
// gRPC servers and h2c-only proxies do) must verify, and one that speaks
// only HTTP/1.1 must not pass as h2c, since no request could reach it.
func TestH2CClaims(t *testing.T) {
	k := key(t)
	pub := k.Public().(ed25519.PublicKey)
	serve := func(h1, h2c bool) string {
		var addr string
		s := httptest.NewUnstartedServer(signer(k, "web-1", func() string { return addr }))
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetHTTP1(h1)
		s.Config.Protocols.SetUnencryptedHTTP2(h2c)
		s.Start()
		t.Cleanup(s.Close)
		addr = addrOf(s)
		return addr
	}
	tests := []struct {
		name     string
		h1, h2c  bool
		verifies bool
	}{
		{"h2c only", false, true, true},
		{"h2c and http/1.1", true, true, true},
		{"http/1.1 only", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serve(tt.h1, tt.h2c)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			err := verify.Host(ctx, nil, verify.Claim{HostID: "web-1", Addr: addr, Scheme: "h2c"}, "gw-1", pub)
			if (err == nil) != tt.verifies {
				t.Fatalf("err = %v, want verified=%v", err, tt.verifies)
			}
		})
	}
}
