package api

import (
	"strings"
	"testing"
)

// TestAuthRequiredNeedsIssuers: on a gateway with no token issuer, an app
// with auth.required would answer every request 401, so its PUT answers
// 400 naming the field and stores nothing; without auth.required, or
// with issuers, it is stored.
func TestAuthRequiredNeedsIssuers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.NoIssuers = true })
	before := e.snapshot()
	r := e.ok("PUT", "/api/v3/apps/shop", `{"auth":{"required":true}}`, 400)
	if d := problemOf(t, r).Detail; !strings.Contains(d, "auth.required") || !strings.Contains(d, "auth.issuers") {
		t.Errorf("detail %q, want auth.required and auth.issuers named", d)
	}
	if after := e.snapshot(); after != before {
		t.Error("a refused PUT changed the store")
	}
	e.ok("PUT", "/api/v3/apps/shop", `{"auth":{"required":false}}`, 200)
	e.ok("PUT", "/api/v3/apps/blog", `{}`, 200)

	withIssuers := newEnv(t, nil)
	withIssuers.ok("PUT", "/api/v3/apps/shop", `{"auth":{"required":true}}`, 200)
}
