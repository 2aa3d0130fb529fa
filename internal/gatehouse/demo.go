package gatehouse

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
)

// DemoOptions configures RunDemo. The zero value is the documented demo:
// the loopback ports of DefaultDemoAddrs, a fresh data directory removed
// on exit.
type DemoOptions struct {
	// Config overrides the demo's configuration when non-nil (tests use
	// port 0 everywhere); Addrs is then ignored.
	Config *config.Config
	// Addrs are the demo's listen addresses when Config is nil; nil is
	// DefaultDemoAddrs.
	Addrs *DemoAddrs
	// Logger receives the gateway's log; nil discards it.
	Logger *slog.Logger
	// Started, if non-nil, is called with the running gateway and the
	// control token once both demo hosts are verified.
	Started func(g *Gatehouse, token string)
}

// DemoAddrs are the addresses `gatehouse demo` listens on; each is set by
// the serve flag of the same name (-http, -https, -management,
// -bus-listen, -dns), so a taken port can be moved.
type DemoAddrs struct {
	HTTP, HTTPS, Management, BusListen, DNS string
}

// DefaultDemoAddrs are the demo's documented ports, all on loopback.
func DefaultDemoAddrs() DemoAddrs {
	return DemoAddrs{
		HTTP:       "127.0.0.1:8080",
		HTTPS:      "127.0.0.1:8443",
		Management: "127.0.0.1:9180",
		BusListen:  "127.0.0.1:4222",
		DNS:        "127.0.0.1:5353",
	}
}

// DemoConfig is the configuration `gatehouse demo` runs: http in serve mode
// on a.HTTP, zone localhost, everything else on a's addresses.
func DemoConfig(dataDir string, a DemoAddrs) config.Config {
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.Zone = "localhost"
	cfg.HTTP.Addr = a.HTTP
	cfg.HTTP.Mode = config.HTTPModeServe
	cfg.HTTPS.Addr = a.HTTPS
	cfg.DNS.Addr = a.DNS
	cfg.Management.Addr = a.Management
	cfg.Bus.Listen = a.BusListen
	cfg.Cluster.ID = "local"
	cfg.Cluster.URL = ""
	if h, p, err := net.SplitHostPort(a.HTTP); err == nil && p != "0" {
		if h == "" || net.ParseIP(h) != nil && net.ParseIP(h).IsUnspecified() {
			h = "127.0.0.1"
		}
		cfg.Cluster.URL = "http://" + net.JoinHostPort(h, p)
	}
	cfg.Control.Token = randomToken()
	return cfg
}

// demoTaken returns an error naming the flag that moves the first of the
// demo's TCP listeners whose address is in use. Found here rather than
// when the gateway binds, the error names the demo's flag, not a config
// key the demo has no way to set.
func demoTaken(cfg config.Config) error {
	for _, l := range []struct{ addr, flag string }{
		{cfg.HTTP.Addr, "-http"},
		{cfg.HTTPS.Addr, "-https"},
		{cfg.Management.Addr, "-management"},
		{cfg.Bus.Listen, "-bus-listen"},
	} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("demo: %s %s: %w; choose another address with %s (127.0.0.1:0 takes any free port)", l.flag, l.addr, err, l.flag)
		}
		ln.Close()
	}
	return nil
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RunDemo runs the whole system in one process until ctx ends: a gateway on
// embedded NATS, the app "hello" and two in-process hosts that enrol their
// keys through the control API, announce themselves on the bus and pass the
// challenge at their own addresses. It prints what to try to out.
func RunDemo(ctx context.Context, out io.Writer, opts DemoOptions) error {
	var cfg config.Config
	if opts.Config != nil {
		cfg = *opts.Config
	} else {
		dir, err := os.MkdirTemp("", "gatehouse-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(dir)
		a := DefaultDemoAddrs()
		if opts.Addrs != nil {
			a = *opts.Addrs
		}
		cfg = DemoConfig(dir, a)
		if err := demoTaken(cfg); err != nil {
			return err
		}
	}
	// A desktop's mDNS daemon (avahi, systemd-resolved) holds 5353, the
	// demo's DNS port; the demo takes a free port for its DNS server
	// rather than fail. What to try is printed with the port it got.
	dnsTaken := ""
	if cfg.DNS.Addr != "" && !bindable(cfg.DNS.Addr) {
		dnsTaken = cfg.DNS.Addr
		if h, _, err := net.SplitHostPort(cfg.DNS.Addr); err == nil {
			cfg.DNS.Addr = net.JoinHostPort(h, "0")
		}
	}
	gw, err := New(cfg, opts.Logger)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return gw.Run(ctx) })
	eg.Go(func() error {
		if err := runDemoHosts(ctx, gw, cfg, out, opts, dnsTaken); err != nil {
			return err
		}
		return nil
	})
	return eg.Wait()
}

// runDemoHosts waits for the gateway, enrols and starts the two hosts, and
// keeps them until ctx ends.
func runDemoHosts(ctx context.Context, gw *Gatehouse, cfg config.Config, out io.Writer, opts DemoOptions, dnsTaken string) error {
	select {
	case <-gw.Ready():
	case <-ctx.Done():
		return nil
	}
	addrs := gw.Addrs()
	api := "http://" + addrs.Management
	c := &controlClient{base: api, token: cfg.Control.Token}
	if err := c.put(ctx, "/api/v3/apps/hello", map[string]any{"mode": "http"}); err != nil {
		return fmt.Errorf("demo: create app: %w", err)
	}
	nc, err := nats.Connect("nats://"+addrs.Bus, nats.MaxReconnects(-1), nats.Name("gatehouse-demo-hosts"))
	if err != nil {
		return fmt.Errorf("demo: bus: %w", err)
	}
	defer nc.Close()

	eg, ctx := errgroup.WithContext(ctx)
	for i := 1; i <= 2; i++ {
		id := fmt.Sprintf("host-%d", i)
		key, err := host.GenerateKey()
		if err != nil {
			return err
		}
		pub := host.PublicKeyString(key.Public().(ed25519.PublicKey))
		if err := c.put(ctx, "/api/v3/hosts/keys/"+id, map[string]any{"public_key": pub, "apps": []string{"hello"}}); err != nil {
			return fmt.Errorf("demo: enrol %s: %w", id, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		h, err := host.New(host.Options{Conn: nc, Cluster: cfg.Cluster.ID, HostID: id, Key: key, Apps: []string{"hello"}, Addr: ln.Addr().String(), Logger: opts.Logger})
		if err != nil {
			ln.Close()
			return err
		}
		srv := &http.Server{Handler: h.Wrap(helloHandler(id)), ReadHeaderTimeout: 10 * time.Second}
		eg.Go(func() error { return serveUntil(ctx, srv, ln) })
		eg.Go(func() error { return h.Run(ctx) })
	}
	eg.Go(func() error {
		if err := waitVerified(ctx, c, 2); err != nil {
			return err
		}
		printDemo(out, cfg, addrs, dnsTaken)
		if opts.Started != nil {
			opts.Started(gw, cfg.Control.Token)
		}
		return nil
	})
	return eg.Wait()
}

func helloHandler(id string) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s (request %d to this host; app %s, client %s, request id %s)\n",
			id, n.Add(1), r.Header.Get("X-Gatehouse-App-Id"), r.Header.Get("X-Gatehouse-Client-Ip"), r.Header.Get("X-Gatehouse-Request-Id"))
	})
}

// serveUntil serves srv on ln and shuts it down gracefully when ctx ends.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	return err
}

// waitVerified polls GET /api/v3/hosts until n hosts are verified.
func waitVerified(ctx context.Context, c *controlClient, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var list struct {
			Hosts []struct {
				State string `json:"state"`
			} `json:"hosts"`
		}
		if err := c.get(ctx, "/api/v3/hosts", &list); err == nil {
			ok := 0
			for _, h := range list.Hosts {
				if h.State == "verified" {
					ok++
				}
			}
			if ok >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("demo: hosts not verified after 30s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// bindable reports whether UDP and TCP addr can both be bound now.
func bindable(addr string) bool {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	defer pc.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	return ln.Close() == nil
}

func printDemo(out io.Writer, cfg config.Config, a Addrs, dnsTaken string) {
	_, httpPort, _ := net.SplitHostPort(a.HTTP)
	dnsLine := ""
	if a.DNS != "" {
		h, p, _ := net.SplitHostPort(a.DNS)
		dnsLine = fmt.Sprintf("  dig @%s -p %s hello.localhost              # the gateway's own DNS for its zone\n", h, p)
		if dnsTaken != "" {
			// Only 5353 is mDNS's: a port moved with -dns was taken by
			// something else, and blaming mDNS would mislead.
			why := ""
			if _, tp, _ := net.SplitHostPort(dnsTaken); tp == "5353" {
				why = " (mDNS's port)"
			}
			dnsLine += fmt.Sprintf("                                               # %s was in use%s, so DNS is on %s\n", dnsTaken, why, a.DNS)
		}
	}
	httpsLine := ""
	if a.HTTPS != "" {
		_, p, _ := net.SplitHostPort(a.HTTPS)
		httpsLine = fmt.Sprintf("  curl -k https://hello.localhost:%s/        # the same over HTTPS (HTTP/2; -k: a self-signed certificate)\n", p)
	}
	fmt.Fprintf(out, `gatehouse demo is running: a gateway on embedded NATS (%s), the app "hello"
on the zone "localhost", and two verified hosts.

Try:
  curl http://hello.localhost:%s/            # twice: host-1, then host-2
%s  curl http://nope.localhost:%s/             # unknown host: 404 problem+json
  curl http://%s/metrics
  curl -H 'Authorization: Bearer %s' http://%s/api/v3/hosts
  curl -H 'Authorization: Bearer %s' http://%s/api/v3/apps
%s  # the dashboard: http://%s/ in a browser (readiness, clusters; apps and hosts with the token)

Press Ctrl-C to stop (the gateway drains in-flight requests first).
`, a.Bus, httpPort, httpsLine, httpPort, a.Management, cfg.Control.Token, a.Management, cfg.Control.Token, a.Management, dnsLine, a.Management)
}

// controlClient is the demo's platform: it calls the control API over HTTP
// like any other client.
type controlClient struct {
	base, token string
}

func (c *controlClient) put(ctx context.Context, path string, body any) error {
	b, _ := json.Marshal(body)
	return c.do(ctx, http.MethodPut, path, b, nil)
}

func (c *controlClient) get(ctx context.Context, path string, into any) error {
	return c.do(ctx, http.MethodGet, path, nil, into)
}

func (c *controlClient) do(ctx context.Context, method, path string, body []byte, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if into != nil {
		return json.Unmarshal(b, into)
	}
	return nil
}
