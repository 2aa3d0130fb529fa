package gateway

import (
	"crypto/ed25519"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// TestHygieneBelievesOnlyVerifiedForwardMarks: the marks of a peer
// gateway name the client only when their signature verifies; either way
// they never reach the host.
func TestHygieneBelievesOnlyVerifiedForwardMarks(t *testing.T) {
	_, selfKey, _ := ed25519.GenerateKey(nil)
	peerPub, peerKey, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	set := cluster.NewSet("c1", []cluster.Peer{
		{ID: "c1", URL: "http://127.0.0.1:1", PublicKey: selfKey.Public().(ed25519.PublicKey), Active: true},
		{ID: "c2", URL: "http://127.0.0.1:2", PublicKey: peerPub, Active: true},
	})
	e := newEnv(t, func(o *Options) {
		o.Cluster = ClusterOptions{Members: func() cluster.Set { return set }, Key: selfKey, NoAffinity: true, NoFailover: true}
	})
	e.backend("h1", "hello", echo())
	const host = "hello.apps.test"
	tests := []struct {
		name   string
		from   string
		key    ed25519.PrivateKey
		ts     time.Time
		client string // what the host must see as X-Gatehouse-Client-Ip
	}{
		{"verified", "c2", peerKey, time.Now(), "198.51.100.7"},
		{"wrong key", "c2", otherKey, time.Now(), "127.0.0.1"},
		{"stale", "c2", peerKey, time.Now().Add(-time.Minute), "127.0.0.1"},
		{"unknown cluster", "c9", peerKey, time.Now(), "127.0.0.1"},
		{"from self", "c1", selfKey, time.Now(), "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark := cluster.SignClient(tt.key, tt.from, "198.51.100.7", tt.ts, host)
			h := echoed(t, e.do("GET", host, "/", http.Header{
				cluster.HeaderForwarded: {tt.from},
				cluster.HeaderClient:    {mark},
				"X-Forwarded-Proto":     {"https"}, // the client's scheme at the forwarding gateway
			}, nil))
			if got := h.Get("X-Gatehouse-Client-Ip"); got != tt.client {
				t.Errorf("client ip %q, want %q", got, tt.client)
			}
			wantProto := "http" // this connection's, for anyone but a verified peer
			if tt.client != "127.0.0.1" {
				wantProto = "https"
			}
			if got := h.Values("X-Forwarded-Proto"); len(got) != 1 || got[0] != wantProto {
				t.Errorf("X-Forwarded-Proto %q, want %q", got, wantProto)
			}
			if h.Get(cluster.HeaderForwarded) != "" || h.Get(cluster.HeaderClient) != "" {
				t.Errorf("marks reached the host: %v", h)
			}
			if want := tt.client + ", 127.0.0.1"; tt.client != "127.0.0.1" && h.Get("X-Forwarded-For") != want {
				t.Errorf("X-Forwarded-For %q, want %q", h.Get("X-Forwarded-For"), want)
			}
		})
	}
}

// TestEarlyAnswersNameTheClientBehindATrustedProxy: the unknown-host 404
// is logged (and charged) to the client a trusted proxy names, not to the
// proxy.
func TestEarlyAnswersNameTheClientBehindATrustedProxy(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })
	readBody(t, e.do("GET", "nope.apps.test", "/", http.Header{"X-Forwarded-For": {"203.0.113.5"}}, nil))
	testutilWaitLog(t, e, `"client_ip":"203.0.113.5"`)
}
