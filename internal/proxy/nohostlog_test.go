package proxy

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestNoHostLogSaysWhatTheClientIsTold: an app the proxy has no host to
// send to logs "proxy: upstream failed" with an error that says what the
// client's problem detail says, so that an operator who reads one finds
// the other: the log said "no routable host" where the client read "no
// healthy host".
func TestNoHostLogSaysWhatTheClientIsTold(t *testing.T) {
	tests := []struct {
		name   string
		hosts  []*route.Host
		status int
		detail string
	}{
		{"no host", nil, http.StatusServiceUnavailable, "no host serves this app"},
		{"only an unhealthy host", []*route.Host{{ID: "h1", Apps: []string{"hello"}, Scheme: "http", Addr: "127.0.0.1:1",
			URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, State: route.HostUnhealthy}}, http.StatusBadGateway, "no healthy host for this app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs testutil.SyncBuffer
			p, _ := New(Options{ClusterID: "c1", Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			t.Cleanup(func() { p.Close() })
			live := new(route.Live)
			b := route.NewBuilder(live)
			b.Replace(route.State{Zones: []*route.Zone{{Name: "apps.test"}},
				Apps: []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive}}})
			for _, h := range tt.hosts {
				b.SetHost(h)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tb := live.Load()
				rq := &route.Request{ID: "rid-1", Table: tb, Match: tb.Lookup("hello.apps.test"), ClientIP: netip.MustParseAddr("192.0.2.7")}
				p.ServeHTTP(w, r.WithContext(route.WithRequest(r.Context(), rq)))
			}))
			t.Cleanup(srv.Close)
			res, err := srv.Client().Get(srv.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var pr struct{ Detail string }
			if err := json.Unmarshal(body, &pr); err != nil || res.StatusCode != tt.status || pr.Detail != tt.detail {
				t.Fatalf("answer %d %s, want %d with detail %q", res.StatusCode, body, tt.status, tt.detail)
			}
			var line struct{ Msg, Error string }
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `"msg":"proxy: upstream failed"`) {
					_ = json.Unmarshal([]byte(l), &line)
				}
			}
			if line.Msg == "" {
				t.Fatalf("no upstream failed line:\n%s", logs.String())
			}
			if !strings.Contains(line.Error, pr.Detail) {
				t.Errorf("the log's error %q does not say the client's detail %q", line.Error, pr.Detail)
			}
		})
	}
}
