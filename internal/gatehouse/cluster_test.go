package gatehouse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A change made through the control API of one gateway is routed by a
// second gateway on the same bus within a second.
func TestSecondGatewaySeesChangesWithinASecond(t *testing.T) {
	a := start(t, testConfig(t))
	cfg := testConfig(t)
	cfg.Bus.URL = []string{a.gatewayBusURL(t)}
	b := start(t, cfg)

	for i := range 3 {
		app := fmt.Sprintf("app%d", i)
		if code, body := a.control(t, "PUT", "/api/v3/apps/"+app, `{}`); code != 200 {
			t.Fatalf("put: %d %s", code, body)
		}
		put := time.Now()
		testutil.WaitFor(t, 5*time.Second, func() bool {
			return b.g.Live().Load().App(app) != nil
		}, "second gateway did not see "+app+" within 1s")
		t.Logf("%s visible on the second gateway after %v", app, time.Since(put))
		// And it routes: the app exists (no host yet: 503), not 404.
		resp, _ := b.get(t, app+".test.local", "/", nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s on second gateway: %d, want 503 (no host)", app, resp.StatusCode)
		}
	}
	if code, _ := a.control(t, "DELETE", "/api/v3/apps/app0", ""); code != 200 && code != 204 {
		t.Fatalf("delete: %d", code)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return b.g.Live().Load().App("app0") == nil }, "delete not seen")
}

// On an external bus, a data directory that does not exist yet is made,
// as the embedded bus makes it: the first start writes the cluster key
// there.
func TestExternalBusMakesTheDataDirectory(t *testing.T) {
	bus := testutil.StartBus(t)
	cfg := testConfig(t)
	cfg.Bus.URL = []string{bus.ClientURL()}
	cfg.DataDir = filepath.Join(t.TempDir(), "not", "yet")
	start(t, cfg)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "cluster.key")); err != nil {
		t.Fatalf("cluster key: %v", err)
	}
}

// With the bus gone, the gateway keeps serving the last table.
func TestServesLastTableWithoutBus(t *testing.T) {
	t.Parallel() // mostly waiting for its stop without a bus; all its own
	bus := testutil.StartBus(t)
	cfg := testConfig(t)
	cfg.Bus.URL = []string{bus.ClientURL()}
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "still here") }))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")
	bus.Shutdown()
	bus.WaitForShutdown()
	for range 5 {
		resp, body := r.get(t, "hello.test.local", "/", nil)
		if resp.StatusCode != 200 || body != "still here" {
			t.Fatalf("without bus: %d %q", resp.StatusCode, body)
		}
	}
}

// The demo runs the documented system: two hosts behind hello, answered in
// turn. Its DNS port taken (as mDNS daemons hold 5353), it serves DNS on
// another and says so.
func TestDemo(t *testing.T) {
	cfg := testConfig(t)
	cfg.Zone = "localhost"
	cfg.Cluster.ID = "local"
	taken, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg.DNS.Addr = taken.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan *Gatehouse, 1)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- RunDemo(ctx, &out, DemoOptions{Config: &cfg, Started: func(g *Gatehouse, _ string) { started <- g }})
	}()
	var g *Gatehouse
	select {
	case g = <-started:
	case err := <-done:
		t.Fatalf("demo stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("demo not started in 30s")
	}
	seen := map[string]int{}
	for range 4 {
		req, _ := http.NewRequest("GET", "http://"+g.Addrs().HTTP+"/", nil)
		req.Host = "hello.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("demo request: %d %s", resp.StatusCode, b)
		}
		f := strings.Fields(string(b))
		seen[f[2]]++
	}
	if seen["host-1"] != 2 || seen["host-2"] != 2 {
		t.Errorf("round robin over the demo hosts: %v", seen)
	}
	if !strings.Contains(out.String(), "curl http://hello.localhost:") {
		t.Errorf("demo output lacks what to try:\n%s", out.String())
	}
	dnsAddr := g.Addrs().DNS
	if dnsAddr == "" || dnsAddr == cfg.DNS.Addr ||
		!strings.Contains(out.String(), "dig @127.0.0.1 -p "+strings.TrimPrefix(dnsAddr, "127.0.0.1:")+" hello.localhost") ||
		!strings.Contains(out.String(), cfg.DNS.Addr+" was in use") {
		t.Errorf("DNS on %q with %s taken; output:\n%s", dnsAddr, cfg.DNS.Addr, out.String())
	}
	q := new(mdns.Msg)
	q.SetQuestion("hello.localhost.", mdns.TypeA)
	resp, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(q, dnsAddr)
	if err != nil || len(resp.Answer) != 1 || resp.Answer[0].(*mdns.A).A.String() != "127.0.0.1" {
		t.Errorf("the printed DNS server's answer for hello.localhost: %v %v", resp, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop")
	}
}

// The demo's note on a taken DNS port blames mDNS only for mDNS's port,
// 5353: any other port was taken by something else, and the note sent
// its reader looking for an avahi that was never there.
func TestPrintDemoNamesMDNSOnlyForItsPort(t *testing.T) {
	for _, c := range []struct {
		taken    string
		wantMDNS bool
	}{
		{"127.0.0.1:5353", true},
		{"127.0.0.1:35353", false},
	} {
		var out bytes.Buffer
		printDemo(&out, config.Default(), Addrs{HTTP: "127.0.0.1:8080", Management: "127.0.0.1:9180", Bus: "127.0.0.1:4222", DNS: "127.0.0.1:54802"}, c.taken)
		if !strings.Contains(out.String(), c.taken+" was in use") {
			t.Errorf("taken %s: output lacks the note:\n%s", c.taken, out.String())
		}
		if got := strings.Contains(out.String(), "mDNS"); got != c.wantMDNS {
			t.Errorf("taken %s: mentions mDNS %v, want %v:\n%s", c.taken, got, c.wantMDNS, out.String())
		}
	}
}

// The demo listens on https too (README: a self-signed certificate), and
// its list of what to try says how to reach it, on the port it got; with
// -https "" it offers no such line.
func TestPrintDemoOffersHTTPS(t *testing.T) {
	for _, https := range []string{"127.0.0.1:40443", ""} {
		var out bytes.Buffer
		printDemo(&out, config.Default(), Addrs{HTTP: "127.0.0.1:8080", HTTPS: https, Management: "127.0.0.1:9180", Bus: "127.0.0.1:4222"}, "")
		got := strings.Contains(out.String(), "curl -k https://hello.localhost:40443/")
		if got != (https != "") {
			t.Errorf("https %q: offers the https line %v:\n%s", https, got, out.String())
		}
		if https == "" && strings.Contains(out.String(), "https://") {
			t.Errorf("https off, yet an https URL:\n%s", out.String())
		}
	}
}

// The demo's list of what to try names the dashboard at the management
// port it got, as the README's does: without it, the one part of the demo
// made for a browser was left for its reader to find.
func TestPrintDemoOffersDashboard(t *testing.T) {
	var out bytes.Buffer
	printDemo(&out, config.Default(), Addrs{HTTP: "127.0.0.1:8080", Management: "127.0.0.1:19180", Bus: "127.0.0.1:4222"}, "")
	if !regexp.MustCompile(`(?m)dashboard.*http://127\.0\.0\.1:19180/( |$)`).MatchString(out.String()) {
		t.Errorf("what to try does not name the dashboard at http://127.0.0.1:19180/:\n%s", out.String())
	}
}
