package gatehouse

import (
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestTokenAppsWithoutIssuersWarned: an app stored with auth.required
// through a gateway with an issuer answers every request 401 on a gateway
// started on the same store without one; that start warns, naming it,
// and the app fails closed.
func TestTokenAppsWithoutIssuersWarned(t *testing.T) {
	cfg := testConfig(t)
	_, keys := issuerKey(t)
	cfg.Auth.Issuers = []config.Issuer{{Issuer: "idp", KeysFile: keys}}
	r := start(t, cfg)
	for app, body := range map[string]string{"locked": `{"auth":{"required":true}}`, "open": `{}`} {
		if code, b := r.control(t, "PUT", "/api/v3/apps/"+app, body); code != 200 {
			t.Fatalf("put %s: %d %s", app, code, b)
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	cfg.Auth.Issuers = nil
	r, logs := startLogging(t, cfg)
	// Ready is announced just before the start's warnings are logged.
	var warned string
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "auth.issuers is empty") {
				warned = l
			}
		}
		return warned != ""
	}, "no warning of the app that requires a token")
	if !strings.Contains(warned, `"apps":["locked"]`) || !strings.Contains(warned, `"count":1`) || !strings.Contains(warned, `"level":"WARN"`) {
		t.Errorf("start log: %q, want a warning naming the app locked alone", warned)
	}
	if resp, body := r.get(t, "locked.test.local", "/", nil); resp.StatusCode != 401 {
		t.Errorf("locked: %d %s, want 401", resp.StatusCode, body)
	}
}
