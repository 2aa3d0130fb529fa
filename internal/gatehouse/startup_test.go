package gatehouse

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDNSBusyClosesListeners: when dns.addr is taken, over UDP or over
// TCP, Run fails with an error naming that address, and the management,
// http and https listeners it had bound before are closed again, so a
// process embedding the gateway gets its ports back.
func TestDNSBusyClosesListeners(t *testing.T) {
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			busy := occupy(t, network)
			cfg := testConfig(t)
			cfg.DNS.Addr = busy
			cfg.Management.Addr, cfg.HTTP.Addr, cfg.HTTPS.Addr = testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
			err := runToError(t, cfg)
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "listen "+network+" "+busy) {
				t.Fatalf("Run = %v, want address in use naming %s %s", err, network, busy)
			}
			for key, addr := range map[string]string{
				"management.addr": cfg.Management.Addr, "http.addr": cfg.HTTP.Addr, "https.addr": cfg.HTTPS.Addr,
			} {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("%s %s still bound after Run failed: %v", key, addr, err)
					continue
				}
				ln.Close()
			}
		})
	}
}

// DNS's default port is mDNS's too, which desktops' daemons hold: the
// refusal says so and how to choose another.
func TestDNSBusyOnMDNSPortSaysSo(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:5353")
	switch {
	case err == nil:
		t.Cleanup(func() { pc.Close() })
	case !errors.Is(err, syscall.EADDRINUSE): // held by an mDNS daemon here: as good
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.DNS.Addr = "127.0.0.1:5353"
	err = runToError(t, cfg)
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "config: dns.addr: ") ||
		!strings.Contains(err.Error(), "5353 is mDNS's port too") || !strings.Contains(err.Error(), "-dns") {
		t.Fatalf("Run = %v", err)
	}
}

// occupy holds a port on 127.0.0.1 over network ("udp" or "tcp") until t
// ends, and returns its address. For "tcp" the same UDP port is free, so
// the DNS server's UDP bind succeeds and its TCP bind is the one refused.
func occupy(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		return pc.LocalAddr().String()
	}
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil { // the UDP port is someone else's: pick again
			ln.Close()
			continue
		}
		pc.Close()
		t.Cleanup(func() { ln.Close() })
		return addr
	}
	t.Fatal("no TCP port on 127.0.0.1 with its UDP port free")
	return ""
}

// TestBusyListenerNamesItsKey: a listener that cannot bind stops the start
// with an error that begins with the config key to change, as every other
// bad value does (DESIGN §11), not the name of a part of the gateway.
func TestBusyListenerNamesItsKey(t *testing.T) {
	for _, key := range []string{"management.addr", "http.addr", "https.addr", "dns.addr", "bus.listen"} {
		t.Run(key, func(t *testing.T) {
			busy := occupy(t, "tcp")
			cfg := testConfig(t)
			cfg.Management.Addr, cfg.HTTP.Addr, cfg.HTTPS.Addr = testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
			cfg.DNS.Addr, cfg.Bus.Listen = "127.0.0.1:0", "127.0.0.1:0"
			switch key {
			case "management.addr":
				cfg.Management.Addr = busy
			case "http.addr":
				cfg.HTTP.Addr = busy
			case "https.addr":
				cfg.HTTPS.Addr = busy
			case "dns.addr":
				cfg.DNS.Addr = busy
			case "bus.listen":
				cfg.Bus.Listen = busy
			}
			err := runToError(t, cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "config: "+key+": ") || !strings.Contains(err.Error(), busy) {
				t.Fatalf("Run = %v, want an error beginning %q and naming %s", err, "config: "+key+": ", busy)
			}
		})
	}
}

// TestDataDirInUseNamesItsKey: a second gateway given the data_dir of a
// running one (its other listeners elsewhere) stops at start, naming
// data_dir, instead of opening the first one's JetStream store beside it
// and serving a table of its own.
func TestDataDirInUseNamesItsKey(t *testing.T) {
	cfg := testConfig(t)
	first := start(t, cfg)
	defer first.stop(t)
	err := runToError(t, cfg) // every address is port 0: only the data dir is shared
	if err == nil || !strings.HasPrefix(err.Error(), "config: data_dir: ") || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Run = %v, want an error beginning %q that says the dir is in use", err, "config: data_dir: ")
	}
}

// runToError runs a gateway of cfg that is expected to stop at start, and
// returns Run's error (30 s at most).
func runToError(t *testing.T, cfg config.Config) error {
	t.Helper()
	g, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return g.Run(ctx)
}

// A static peer of another id given this cluster's own public key (a
// copy-paste slip) stops the start, naming the entry: that peer's marks
// would never verify.
func TestPeerWithOwnKeyRefused(t *testing.T) {
	dir := t.TempDir()
	keyFile := dir + "/cluster.pem"
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Cluster.Key = keyFile
	own := host.PublicKeyString(k.Public().(ed25519.PublicKey))
	cfg.Clusters = []config.Peer{
		{ID: cfg.Cluster.ID, URL: "http://127.0.0.1:1", PublicKey: own}, // itself, as a shared list has it: fine
		{ID: "other", URL: "http://127.0.0.1:2", PublicKey: own},
	}
	_, err = New(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), `config: clusters[1].public_key: is this cluster's own key (cluster.key), not cluster "other"'s`) {
		t.Fatalf("New = %v", err)
	}
}

// TestDataDirClusterKeyChecked: the cluster key gatehouse generated into
// data_dir (no cluster.key set) is the same secret as a configured one,
// and held to the same rules before anything starts: readable by group or
// others, or holding no key, it stops New naming the file. It was loaded
// without a look at its mode, and one that held no key was found only
// after the embedded bus had started and the zone was seeded.
func TestDataDirClusterKeyChecked(t *testing.T) {
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		mode os.FileMode
		bad  bool // not a key
		want string
	}{
		{"readable by others", 0o644, false, "has mode 0644; it holds the cluster's private key: chmod 600 it"},
		{"readable by group", 0o640, false, "has mode 0640; it holds the cluster's private key: chmod 600 it"},
		{"no key", 0o600, true, "config: cluster.key: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			path := filepath.Join(cfg.DataDir, "cluster.key")
			if tt.bad {
				err = os.WriteFile(path, []byte("not a key\n"), 0o600)
			} else {
				err = host.WriteKey(path, k)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := New(cfg, nil)
			if err == nil || !strings.HasPrefix(err.Error(), "config: cluster.key: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error beginning %q with %q", err, "config: cluster.key: ", tt.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
		})
	}
	// The key as gatehouse writes it (0600) is taken.
	cfg := testConfig(t)
	if err := host.WriteKey(filepath.Join(cfg.DataDir, "cluster.key"), k); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, nil); err != nil {
		t.Fatalf("New with a 0600 key in data_dir: %v", err)
	}
}

// TestBadBusValuesNamedByNew: the bus.url and bus.listen values the bus
// refuses (config.Validate checks only their shape) stop New with one
// line naming the key, the credential hidden, before anything is bound.
// They passed New and stopped Run later, once the listeners were bound,
// with the bus's word ("bus: url ...") naming no key.
func TestBadBusValuesNamedByNew(t *testing.T) {
	for _, tt := range []struct {
		name        string
		url, listen string
		want        string
	}{
		{"url port", "nats://gatehouse:s3cret@nats-1:4222,nats://nats-2:99999", "", `config: bus.url: "nats://nats-2:99999": bad port "99999"`},
		{"url path", "nats://nats-1:4222/gatehouse", "", `config: bus.url: "nats://nats-1:4222/gatehouse": must be scheme://host:port only`},
		{"url mixed", "nats://nats-1:4222,wss://gatehouse:s3cret@nats-2:443", "", `config: bus.url: "nats://nats-1:4222,wss://gatehouse:xxxxx@nats-2:443": mixes ws/wss with nats/tls URLs`},
		{"listen name", "", "nats.example.com:4222", `config: bus.listen: host must be an IP address or localhost, got "nats.example.com:4222"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tt.url != "" {
				cfg.Bus.URL = strings.Split(tt.url, ",")
			}
			if tt.listen != "" {
				cfg.Bus.Listen = tt.listen
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate = %v; the case is for what it lets through", err)
			}
			_, err := New(cfg, nil)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New = %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestPeerWithOwnKeyChangesNothing: the refusal of a static peer given
// this cluster's own key comes before anything starts, as every other bad
// value's does: the data directory is left as it was, with no embedded
// bus store, credential or seeded zone of a gateway that never ran.
func TestPeerWithOwnKeyChangesNothing(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "cluster.pem")
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Cluster.Key = keyFile
	cfg.Clusters = []config.Peer{{ID: "other", URL: "http://127.0.0.1:2", PublicKey: host.PublicKeyString(k.Public().(ed25519.PublicKey))}}
	g, err := New(cfg, nil)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = g.Run(ctx)
		cancel()
	}
	if err == nil || !strings.HasPrefix(err.Error(), "config: clusters[0].public_key: ") {
		t.Fatalf("start = %v, want the peer's key refused", err)
	}
	if ents, _ := os.ReadDir(cfg.DataDir); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("a refused start wrote %v into the data dir", names)
	}
}

// TestDataDirNotADirectoryNamesItsKey: a data_dir that is a file, or lies
// under one, stops the start at New, naming data_dir, before anything is
// bound; it once failed in Run, after the listeners were up, as the
// embedded bus's "bus: mkdir …" or, with cluster.key left empty, as
// "config: cluster.key: …", a key the operator never set.
func TestDataDirNotADirectoryNamesItsKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, dir string
		bus       []string
	}{
		{"a file", file, nil},
		{"under a file", filepath.Join(file, "gatehouse"), nil},
		{"a file, external bus", file, []string{"nats://127.0.0.1:4222"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.DataDir = tt.dir
			cfg.Bus.URL = tt.bus
			_, err := New(cfg, nil)
			want := "config: data_dir: " + file + " is not a directory"
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("New = %v, want an error beginning %q", err, want)
			}
		})
	}
}

// TestDataDirUnwritableNamesItsKey: a data_dir the embedded bus cannot
// make (here under /proc, where nobody, root included, creates a
// directory; a read-only mount does the same) stops the start naming
// data_dir, not as the bus's bare "bus: mkdir …".
func TestDataDirUnwritableNamesItsKey(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	cfg := testConfig(t)
	cfg.DataDir = "/proc/gatehouse-test/data"
	err := runToError(t, cfg)
	if err == nil || !strings.HasPrefix(err.Error(), "config: data_dir: ") || !strings.Contains(err.Error(), "/proc/gatehouse-test") {
		t.Fatalf("Run = %v, want an error beginning %q", err, "config: data_dir: ")
	}
}
