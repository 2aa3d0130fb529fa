package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/logcut"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestClusterWarningsBoundTheMethod: the warnings about an owner that
// could not take a request and a peer that did not answer in time repeat
// the request's method, which a client may send as long as the header
// block allows. hygiene refuses one over maxMethod (32 bytes) before the
// cluster layer, so the longest that reaches the warnings is logged
// whole, within the access log's bound (the cut there only guards that
// bound if maxMethod grows), and a longer one is answered 400 and never
// forwarded. The debug line for a forward mark naming no peer repeats a
// field the client sent, which nothing bounds but the header block: it
// is logged cut, with the access log's marker naming its length.
func TestClusterWarningsBoundTheMethod(t *testing.T) {
	method := "M" + strings.Repeat("X", maxMethod-1)
	if len(method) > logcut.MaxMethod {
		t.Fatalf("maxMethod %d is past the access log's bound %d: a method the gateway passes would be logged cut", maxMethod, logcut.MaxMethod)
	}
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(hung.Close)
	refused := "http://" + testutil.RefusedAddr(t)
	var usLogs, euLogs testutil.SyncBuffer
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: time.Second, edit: func(c *testCluster, o *Options) {
		switch c.id {
		case "us":
			// us's idea of ap is an address that refuses connections.
			o.Logger = slog.New(slog.NewJSONHandler(&usLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			members := o.Cluster.Members
			o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "ap", refused) }
		case "eu":
			// eu's idea of ap is a gateway that never answers.
			o.Logger = slog.New(slog.NewJSONHandler(&euLogs, nil))
			members := o.Cluster.Members
			o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "ap", hung.URL) }
		}
	}})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)

	if res, body := send(t, cl, cs["us"], "M"+strings.Repeat("X", 4999), app, "/page", nil); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a 5000-byte method: %d %q, want 400 from hygiene before any forward", res.StatusCode, body)
	}

	for _, c := range []struct {
		via  string
		logs *testutil.SyncBuffer
		msg  string
	}{
		{"us", &usLogs, "gateway: the owner cluster could not take a request for its app"},
		{"eu", &euLogs, "gateway: a peer cluster did not answer a forward within cluster.deadline"},
	} {
		send(t, cl, cs[c.via], method, app, "/page", nil)
		var line string
		testutil.WaitFor(t, 10*time.Second, func() bool {
			for _, l := range strings.Split(c.logs.String(), "\n") {
				if strings.Contains(l, `"msg":"`+c.msg) {
					line = l
					return true
				}
			}
			return false
		}, "no warning: "+c.msg)
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("%s: %v", c.msg, err)
		}
		if got, _ := fields["method"].(string); got != method {
			t.Errorf("%s: method %q logged as %q, want it whole", c.msg, method, got)
		}
	}

	// A mark naming no peer is stripped, at debug naming what it said:
	// the client's field, cut as a method is.
	mark := strings.Repeat("f", 5000)
	send(t, cl, cs["us"], http.MethodGet, app, "/page", http.Header{cluster.HeaderForwarded: {mark}})
	const msg = `"msg":"gateway: forward mark naming no peer stripped"`
	var line string
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, l := range strings.Split(usLogs.String(), "\n") {
			if strings.Contains(l, msg) && strings.Contains(l, "truncated from") {
				line = l
				return true
			}
		}
		return false
	}, "no debug line with a cut mark: "+msg)
	var fields map[string]any
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		t.Fatal(err)
	}
	got, _ := fields["from"].(string)
	want := "...[truncated from 5000 bytes]"
	if len(got) > 512 || !strings.HasSuffix(got, want) || !strings.HasPrefix(mark, strings.TrimSuffix(got, want)) {
		t.Errorf("a %d-byte mark logged as %d bytes ending %q; want at most 512, ending %q", len(mark), len(got), got[max(0, len(got)-60):], want)
	}
}
