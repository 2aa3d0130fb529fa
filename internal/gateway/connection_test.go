package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestClientConnectionKeepsGatewayFields: a client's Connection field
// names hop-by-hop fields of its own (RFC 9110 §7.6.1), which are not
// passed on; it cannot name away the fields the gateway sets toward the
// host (DESIGN §2: the request id, the context headers, the forwarding
// fields). Each such name listed alone, and all at once, with and
// without a request id of the client's: the host gets every field the
// gateway sets, X-Request-Id being the id the client is answered with,
// while a field the client sent and listed is dropped.
func TestClientConnectionKeepsGatewayFields(t *testing.T) {
	own := []string{"X-Request-Id", "X-Gatehouse-Request-Id", "X-Gatehouse-App-Id", "X-Gatehouse-Client-Ip",
		"X-Gatehouse-Cluster", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"}
	lists := [][]string{own}
	for _, k := range own {
		lists = append(lists, []string{strings.ToLower(k)})
	}
	e := newEnv(t, nil)
	e.backend("h1", "hello", echo())
	for _, list := range lists {
		for _, clientID := range []string{"", "trace-1"} {
			hdr := http.Header{"Connection": {strings.Join(append([]string{"X-Mine"}, list...), ", ")}, "X-Mine": {"mine"}}
			if clientID != "" {
				hdr["X-Request-Id"] = []string{clientID}
			}
			res := e.do("GET", "hello."+testZone, "/", hdr, nil)
			id := res.Header.Get("X-Request-Id")
			got := echoed(t, res)
			want := map[string]string{
				"X-Request-Id":           id,
				"X-Gatehouse-Request-Id": id,
				"X-Gatehouse-App-Id":     "hello",
				"X-Gatehouse-Client-Ip":  "127.0.0.1",
				"X-Gatehouse-Cluster":    "c1",
				"X-Forwarded-For":        "127.0.0.1",
				"X-Forwarded-Proto":      "http",
				"X-Forwarded-Host":       "hello." + testZone,
			}
			if clientID != "" && id != clientID {
				t.Errorf("Connection: %s: answered with request id %q, want the client's %q", list, id, clientID)
			}
			for k, v := range want {
				if g := got[k]; !slices.Equal(g, []string{v}) {
					t.Errorf("Connection: %s (client id %q): the host got %s %q, want %q", list, clientID, k, g, v)
				}
			}
			if g := got["X-Mine"]; g != nil {
				t.Errorf("Connection: %s: the host got the client's hop-by-hop X-Mine %q", list, g)
			}
		}
	}
}

// TestForwardConnectionKeepsRequestID: a request forwarded to its owner
// cluster keeps its request id whatever the client's Connection lists:
// the owner's host gets it, and the client is answered with it, the id
// the gateway it reached logged. Without it the owner would make an id of
// its own, and the trace would not join up.
func TestForwardConnectionKeepsRequestID(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)
	hdr := http.Header{"Connection": {"X-Request-Id"}, "X-Request-Id": {"trace-1"}}
	res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", hdr)
	if res.StatusCode != http.StatusOK || body != "served by ap" {
		t.Fatalf("GET via eu = %d %q, want 200 served by ap", res.StatusCode, body)
	}
	if got := res.Header.Get("X-Request-Id"); got != "trace-1" {
		t.Errorf("answered with X-Request-Id %q, want trace-1", got)
	}
	seen := cs["ap"].host.requests()
	if len(seen) != 1 || seen[0].RequestID != "trace-1" {
		t.Errorf("the owner's host got %+v, want one request with X-Request-Id trace-1", seen)
	}
}
