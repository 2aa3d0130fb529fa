package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestSidecarH2CToHTTP1UpstreamSaysSo: with -scheme h2c the sidecar
// speaks HTTP/2 cleartext to an http:// upstream; an app that speaks
// HTTP/1.1 only answers the HTTP/2 preface with an HTTP/1 response, which
// net/http reports as "http2: frame too large". The 502 stays, and the
// warning says what that means and what to give instead, rather than
// leaving the operator to decode a frame error from an app that is up.
func TestSidecarH2CToHTTP1UpstreamSaysSo(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello"))
	}))
	defer app.Close()
	up, _ := url.Parse(app.URL)
	var logs testutil.SyncBuffer
	side := httptest.NewServer(sidecarProxy(up, host.SchemeH2C, slog.New(slog.NewJSONHandler(&logs, nil))))
	defer side.Close()
	res, err := side.Client().Get(side.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
	line := logs.String()
	if !strings.Contains(line, `"msg":"host: upstream failed"`) {
		t.Fatalf("no upstream failure logged:\n%s", line)
	}
	for _, want := range []string{"does not speak h2c", "-scheme http"} {
		if !strings.Contains(line, want) {
			t.Errorf("the warning does not say %q:\n%s", want, line)
		}
	}
}
