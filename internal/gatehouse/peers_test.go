package gatehouse

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// Two clusters, each a whole gatehouse with its own embedded bus, know
// each other from the static list in their config. A request for an app
// owned by the other cluster is forwarded there and served by its host;
// with the owner's host gone, a GET fails over back and a POST does not.
func TestTwoClustersFromConfig(t *testing.T) {
	t.Parallel() // mostly waiting on the clusters finding each other, with gateways of its own
	ids := []string{"alpha", "beta"}
	httpAddr := map[string]string{}
	keyFile := map[string]string{}
	pub := map[string]string{}
	dir := t.TempDir()
	for _, id := range ids {
		httpAddr[id] = testutil.FreeAddr(t)
		k, err := host.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keyFile[id] = filepath.Join(dir, id+".key")
		if err := host.WriteKey(keyFile[id], k); err != nil {
			t.Fatal(err)
		}
		pub[id] = host.PublicKeyString(k.Public().(ed25519.PublicKey))
	}
	// An app owned by beta.
	app := ""
	for i := 0; app == ""; i++ {
		if a := fmt.Sprintf("app%d", i); cluster.Owner(a, ids) == "beta" {
			app = a
		}
	}
	gw := map[string]*running{}
	for _, id := range ids {
		cfg := testConfig(t)
		cfg.Cluster.ID = id
		cfg.Cluster.URL = "http://" + httpAddr[id]
		cfg.Cluster.Key = keyFile[id]
		cfg.Cluster.Deadline = 5 * time.Second
		cfg.HTTP.Addr = httpAddr[id]
		for _, p := range ids {
			cfg.Clusters = append(cfg.Clusters, config.Peer{ID: p, URL: "http://" + httpAddr[p], PublicKey: pub[p]})
		}
		gw[id] = start(t, cfg)
	}
	hits := map[string]chan string{}
	for _, id := range ids {
		r := gw[id]
		if code, body := r.control(t, "PUT", "/api/v3/apps/"+app, `{}`); code != 200 {
			t.Fatalf("put: %d %s", code, body)
		}
		ch := make(chan string, 16)
		hits[id] = ch
		startHostCluster(t, r, id, id+"-host", app, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			ch <- req.Method + " " + req.Header.Get("X-Gatehouse-Client-Ip")
			io.WriteString(w, "served by "+id)
		}))
	}
	for _, id := range ids {
		r := gw[id]
		testutil.WaitFor(t, 15*time.Second, func() bool {
			resp, err := http.Get("http://" + r.g.Addrs().Management + "/api/v3/discovery/clusters")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var d struct {
				Self     string
				Clusters []struct {
					ID     string
					Active bool
				}
			}
			if json.NewDecoder(resp.Body).Decode(&d) != nil || d.Self != id {
				return false
			}
			n := 0
			for _, c := range d.Clusters {
				if c.Active {
					n++
				}
			}
			return n == 2 && len(r.g.Live().Load().Pool(app)) == 1
		}, id+" never saw both clusters active")
	}

	// Landing on alpha, served by beta's host, with the client's address.
	resp, body := gw["alpha"].get(t, app+".test.local", "/", nil)
	if resp.StatusCode != 200 || body != "served by beta" || resp.Header.Get("X-Gatehouse-Cluster") != "beta" {
		t.Fatalf("owner forward: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if got := <-hits["beta"]; got != "GET 127.0.0.1" {
		t.Fatalf("beta's host saw %q", got)
	}

	// beta's host gone: a GET landing on beta fails over to alpha; a POST
	// is never replayed.
	gw["beta"].control(t, "DELETE", "/api/v3/hosts/keys/beta-host", "")
	testutil.WaitFor(t, 15*time.Second, func() bool { return len(gw["beta"].g.Live().Load().Pool(app)) == 0 }, "beta host still routable")
	resp, body = gw["beta"].get(t, app+".test.local", "/", nil)
	if resp.StatusCode != 200 || body != "served by alpha" || resp.Header.Get("X-Failover-Cluster") != "alpha" {
		t.Fatalf("failover: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	req, _ := http.NewRequest("POST", "http://"+gw["beta"].g.Addrs().HTTP+"/", nil)
	req.Host = app + ".test.local"
	presp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	if presp.StatusCode < 500 {
		t.Fatalf("POST without a local host: %d, want 5xx and no replay", presp.StatusCode)
	}
	<-hits["alpha"] // the failed-over GET
	select {
	case h := <-hits["alpha"]:
		t.Fatalf("alpha's host saw a replayed request: %s", h)
	case <-time.After(200 * time.Millisecond):
	}
}

// startHostCluster is startHost for a gateway whose cluster id is not "one".
func startHostCluster(t *testing.T, r *running, clusterID, id, app string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runHost(t, r, clusterID, id, app, "http", ln, h)
}

// A cluster without cluster.url shares a bus with one that has it. It is
// not announced (there is no URL to forward to, and it says so at start),
// but it still learns of the other from its announcements, whose apps it
// can then forward there. It used to turn announcements off both ways: it
// never saw the other cluster, and served every app itself.
func TestClusterWithoutURLStillListens(t *testing.T) {
	bus := testutil.StartBus(t)
	var logs testutil.SyncBuffer
	gw := map[string]*running{}
	// beta first: alpha's first announcement, at its start, then finds
	// beta listening, rather than beta waiting for the next (5 s).
	for _, id := range []string{"beta", "alpha"} {
		cfg := testConfig(t)
		cfg.Bus.URL = []string{bus.ClientURL()}
		cfg.Cluster.ID = id
		if id == "alpha" {
			cfg.HTTP.Addr = testutil.FreeAddr(t)
			cfg.Cluster.URL = "http://" + cfg.HTTP.Addr
		}
		gw[id] = startWith(t, cfg, func(g *Gatehouse) {
			if id == "beta" {
				g.log = slog.New(slog.NewTextHandler(&logs, nil))
			}
		})
	}
	discovery := func(r *running) map[string]bool {
		resp, err := http.Get("http://" + r.g.Addrs().Management + "/api/v3/discovery/clusters")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var d struct {
			Clusters []struct {
				ID     string
				Active bool
			}
		}
		if json.NewDecoder(resp.Body).Decode(&d) != nil {
			return nil
		}
		out := map[string]bool{}
		for _, c := range d.Clusters {
			out[c.ID] = c.Active
		}
		return out
	}
	testutil.WaitFor(t, 15*time.Second, func() bool { return discovery(gw["beta"])["alpha"] }, "beta never learnt of alpha from its announcements")
	if _, ok := discovery(gw["alpha"])["beta"]; ok {
		t.Fatalf("alpha knows beta, which has no URL: %v", discovery(gw["alpha"]))
	}
	if !strings.Contains(logs.String(), "this cluster is not announced to peer clusters, as cluster.url is empty") {
		t.Fatalf("beta did not say why it is not announced:\n%s", logs.String())
	}
}
