package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// forgeFields puts on h what a host may send in the gateway's name: the
// fields the gateway sets on responses (X-Gatehouse-*, in any spelling,
// and X-Failover-Cluster), and one of its own that must reach the client.
func forgeFields(h http.Header) {
	for k, v := range map[string]string{
		"X-Gatehouse-No-Host":   "AAAA",
		"X-Gatehouse-Forwarded": "us",
		"X-Gatehouse-Subject":   "root",
		"X_Gatehouse_Scopes":    "admin", // a CGI-style spelling, as hygiene strips it from clients
		"x-gatehouse-issuer":    "evil",
		"X-Gatehouse-Cluster":   "evil",
		"X-Failover-Cluster":    "evil",
		"X-Gatehousekeeping":    "kept", // not X-Gatehouse-*: the host's
		"X-App-Own":             "kept",
	} {
		h[k] = []string{v}
	}
}

// forgingHost answers every request with forgeFields; at /hints it sends
// them on a 103 Early Hints first.
func forgingHost() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hints" {
			forgeFields(w.Header())
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			clear(w.Header())
		}
		forgeFields(w.Header())
		fmt.Fprint(w, "hello")
	})
}

// forgedLeft returns what of forgeFields reached a client in h, cluster
// being the one X-Gatehouse-Cluster it may carry, or says a host's own
// field went missing.
func forgedLeft(h http.Header, cluster string) []string {
	var bad []string
	for k, v := range h {
		n := strings.ToLower(strings.ReplaceAll(k, "_", "-"))
		switch {
		case k == "X-Gatehouse-Cluster" && len(v) == 1 && v[0] == cluster:
		case strings.HasPrefix(n, "x-gatehouse-"), n == "x-failover-cluster":
			bad = append(bad, fmt.Sprintf("%s: %q", k, v))
		}
	}
	for _, k := range []string{"X-App-Own", "X-Gatehousekeeping"} {
		if v := h.Values(k); len(v) != 1 || v[0] != "kept" {
			bad = append(bad, fmt.Sprintf("the host's own %s: %q, want kept", k, v))
		}
	}
	return bad
}

// TestHostCannotSpeakInTheGatewaysName: the response fields the gateway
// sets itself (X-Gatehouse-Cluster, X-Gatehouse-No-Host, X-Failover-
// Cluster, and every other X-Gatehouse-* in any spelling) are dropped
// from a host's response and its 1xx on every path: the fast path
// (GET to an http host), ReverseProxy (a POST; an h2c host), to clients
// over HTTP/1.1 and HTTP/2 alike. They reached the client as the host sent
// them (but X-Gatehouse-Cluster and X-Failover-Cluster), while a forward
// from another cluster dropped the owner's host's X-Gatehouse-No-Host: a
// client could not tell the gateway's word from a host's.
func TestHostCannotSpeakInTheGatewaysName(t *testing.T) {
	for _, scheme := range []string{"http", "h2c"} {
		e := newEnv(t, nil)
		s := h2cServer(forgingHost())
		t.Cleanup(s.Close)
		e.addHost("h1", "hello", scheme, strings.Replace(s.URL, "http:", scheme+":", 1))
		gw := h2cServer(asEdge(e.gw))
		t.Cleanup(gw.Close)
		for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			if proto == "HTTP/2.0" {
				tr.Protocols.SetUnencryptedHTTP2(true)
			} else {
				tr.Protocols.SetHTTP1(true)
			}
			t.Cleanup(tr.CloseIdleConnections)
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				for _, path := range []string{"/", "/hints"} {
					name := fmt.Sprintf("%s host, %s client, %s %s", scheme, proto, method, path)
					var early []string
					trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
						if code == http.StatusEarlyHints {
							early = forgedLeft(http.Header(h), "c1") // the gateway stamps its 1xx too
						}
						return nil
					}}
					var body io.Reader
					if method == http.MethodPost {
						body = strings.NewReader(`{"x":1}`)
					}
					req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, gw.URL+path, body)
					if err != nil {
						t.Fatal(err)
					}
					req.Host = "hello." + testZone
					res, err := cl.Do(req)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					b := readBody(t, res)
					if res.StatusCode != http.StatusOK || b != "hello" || res.Proto != proto {
						t.Fatalf("%s: %s %d %q, want %s 200 hello", name, res.Proto, res.StatusCode, b, proto)
					}
					if bad := forgedLeft(res.Header, "c1"); len(bad) > 0 {
						t.Errorf("%s: the client got the host's %s", name, strings.Join(bad, ", "))
					}
					if path == "/hints" && len(early) > 0 {
						t.Errorf("%s: the client's 103: %s", name, strings.Join(early, ", "))
					}
				}
			}
		}
	}
}

// TestOwnersHostCannotSpeakInTheGatewaysName: a request served by its
// owner's host gets none of the gateway's fields the host forged, whether
// it reached the owner directly or through another cluster's gateway,
// over HTTP/1.1 or HTTP/2 between gateways: both paths agree. The owner's
// gateway drops them, so a forged X-Gatehouse-No-Host never reaches the
// forwarding gateway either (which could not verify it anyway).
func TestOwnersHostCannotSpeakInTheGatewaysName(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) {
			cs := startClusters(t, clusterSetup{ids: threeIDs, tls: overTLS})
			cs["ap"].host.mode.Store(hostForge)
			app := ownedBy(t, "ap", threeIDs)
			var cl *http.Client
			if overTLS {
				cl = clClient(t, cs["ap"].roots)
			} else {
				cl = clClient(t)
			}
			for _, via := range []string{"ap", "us"} {
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					res, body := send(t, cl, cs[via], method, app, "/", nil)
					if res.StatusCode != http.StatusOK || body != "served by ap" {
						t.Fatalf("%s via %s = %d %q, want 200 served by ap", method, via, res.StatusCode, body)
					}
					if bad := forgedLeft(res.Header, "ap"); len(bad) > 0 {
						t.Errorf("%s via %s: the client got the host's %s", method, via, strings.Join(bad, ", "))
					}
				}
			}
		})
	}
}
