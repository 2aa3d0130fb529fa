package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/gcfloor"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// serveToken is the control token TestServeEndToEnd serves with.
const serveToken = "serve-test-token-0123456789"

// TestServeEndToEnd runs `gatehouse serve` as a user would (temp data
// dir, control token), drives it with `gatehouse ctl`, and stops it with
// the signal context: serve returns nil after draining. While it runs,
// its GC floor (runtime.gc_floor_mb) holds GOGC up; after, GOGC is back.
func TestServeEndToEnd(t *testing.T) {
	base := gcfloor.GOGC()
	mgmt := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve",
			"-data", t.TempDir(), "-zone", "apps.test", "-control-token", serveToken,
			"-http", "127.0.0.1:0", "-http-mode", "serve", "-https", "127.0.0.1:0", "-dns", "127.0.0.1:0",
			"-management", mgmt, "-bus-listen", "127.0.0.1:0", "-drain-timeout", "5s",
			"-runtime-gc-floor-mb", "512",
		}, &bytes.Buffer{}, &logs)
	}()
	testutil.WaitFor(t, 20*time.Second, readyzIs(t, mgmt, done, &logs, 200), "serve never became ready")

	// A serving process's live heap is tens of MB: far under 512 MiB.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		runtime.GC()
		return gcfloor.GOGC() > 400
	}, "GOGC never rose for the 512 MiB floor")

	api := "http://" + mgmt
	for _, args := range [][]string{
		{"apps", "put", "shop", `{"rate_limit":{"requests":10}}`},
		{"keys", "put", "web-1", `{"public_key":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=","apps":["shop"]}`},
	} {
		if _, _, err := runCmd(t, append([]string{"ctl", "-api", api, "-token", serveToken}, args...)...); err != nil {
			t.Fatalf("ctl %q: %v", args, err)
		}
	}
	out, _, err := runCmd(t, "ctl", "-api", api, "-token", serveToken, "apps", "get", "shop")
	if err != nil || !strings.Contains(out, `"requests": 10`) {
		t.Errorf("app read back: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "ctl", "-api", api, "-token", serveToken, "keys", "list")
	if err != nil || !strings.Contains(out, `"web-1"`) {
		t.Errorf("keys read back: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "ctl", "-api", api, "-token", serveToken, "zones", "get", "apps.test")
	if err != nil {
		t.Errorf("seeded zone: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "ctl", "-api", api, "apps", "list"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("no token: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
		if got := gcfloor.GOGC(); got != base {
			t.Errorf("GOGC = %d after serve returned, want %d back", got, base)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

// TestServeBadKeyFileChangesNothing: a key file that exists but holds no
// key stops serve with an error naming its key, before anything starts
// (DESIGN §11: bad input changes nothing else). Found at run time instead,
// the data directory was already created, the embedded bus's credential
// and JetStream store written, the cluster key generated and the -zone
// seeded into the store, all for a start that failed.
func TestServeBadKeyFileChangesNothing(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		key  string
	}{
		{"issuer keys", []string{"-issuer", "https://id.example.com=" + junk}, "auth.issuers[0].keys_file"},
		{"cluster key", []string{"-cluster-key", junk}, "cluster.key"},
		{"acme ca root", []string{"-tls-acme-directory", "https://127.0.0.1:1/dir", "-tls-acme-ca-root", junk}, "tls.acme.ca_root"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(dir, fmt.Sprintf("data-%d", i))
			args := append([]string{"serve", "-data", data, "-zone", "apps.test",
				"-http", "127.0.0.1:0", "-https", "127.0.0.1:0", "-dns", "127.0.0.1:0",
				"-management", "127.0.0.1:0", "-bus-listen", "127.0.0.1:0"}, c.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil {
				t.Fatal("serve succeeded")
			}
			if msg := err.Error(); !strings.Contains(msg, c.key) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming %s", msg, c.key)
			}
			if exitCode(err, &bytes.Buffer{}) != 1 {
				t.Errorf("exit code not 1")
			}
			if ents, err := os.ReadDir(data); !os.IsNotExist(err) {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("data_dir written by a start that failed: %v %v", names, err)
			}
		})
	}
}

// TestServeStoppedWhileStarting: a stop (SIGTERM, the signal context)
// that comes while serve still waits for its bus is a stop, not a failure:
// serve returns nil, so the process exits 0, as after a drain, and the
// management listener it bound is closed. It used to fail with "bus: not
// connected to ...: context canceled", exit 1.
func TestServeStoppedWhileStarting(t *testing.T) {
	mgmt := testutil.FreeAddr(t)
	down := testutil.FreeAddr(t) // nothing listens: the bus never answers
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve",
			"-data", t.TempDir(), "-bus", "nats://" + down,
			"-http", "", "-https", "", "-dns", "", "-management", mgmt,
		}, &bytes.Buffer{}, &logs)
	}()
	testutil.WaitFor(t, 20*time.Second, readyzIs(t, mgmt, done, &logs, http.StatusServiceUnavailable), "serve never answered /readyz while starting")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve stopped while starting: %v (exit %d), want nil", err, exitCode(err, &bytes.Buffer{}))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	if c, err := net.Dial("tcp", mgmt); err == nil {
		c.Close()
		t.Error("management listener still open after serve returned")
	}
}

// TestServeIgnoresHangup: SIGHUP, what a service manager's reload sends,
// does not stop serve (it killed the process at once, exit 129, with no
// drain and nothing logged): serve logs that reload is not supported and
// goes on answering; a stop then drains as usual.
func TestServeIgnoresHangup(t *testing.T) {
	mgmt := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"serve",
			"-data", t.TempDir(), "-http", "", "-https", "", "-dns", "",
			"-management", mgmt, "-bus-listen", "127.0.0.1:0",
		}, &bytes.Buffer{}, &logs)
	}()
	ready := readyzIs(t, mgmt, done, &logs, 200)
	testutil.WaitFor(t, 20*time.Second, ready, "serve never became ready")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	const want = `"level":"WARN","msg":"SIGHUP ignored: configuration reload is not supported; restart gatehouse`
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), want) }, "no log line for SIGHUP")
	if !ready() {
		t.Error("serve not ready after SIGHUP")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after stop: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

// TestServeClusterKeyReadableByOthers: a cluster.key other users can read
// stops serve as a readable bus.token does, one line naming the key and
// the fix, before anything is written. It was accepted in silence.
func TestServeClusterKeyReadableByOthers(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "cluster.key")
	if _, _, err := runCmd(t, "keygen", "-out", key); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(dir, fmt.Sprintf("data-%o", mode))
		// Bounded: a start that takes the key serves until stopped.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := run(ctx, []string{"serve", "-data", data, "-cluster-key", key,
			"-http", "127.0.0.1:0", "-https", "127.0.0.1:0", "-dns", "", "-management", "127.0.0.1:0", "-bus-listen", "127.0.0.1:0"},
			&bytes.Buffer{}, &bytes.Buffer{})
		cancel()
		want := fmt.Sprintf("config: cluster.key (-cluster-key): %s has mode %04o; it holds the cluster's private key: chmod 600 it", key, mode)
		if err == nil || err.Error() != want {
			t.Errorf("mode %04o: error %v\nwant %s", mode, err, want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("mode %04o: data_dir written by a start that failed: %v", mode, err)
		}
	}
}

// TestServeLogsDurationsAsText: serve's log writes durations as Go
// duration text, as the config takes them, not slog's unitless integer
// nanoseconds ("duration":1234567): the access log's duration here.
func TestServeLogsDurationsAsText(t *testing.T) {
	mgmt, httpAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"serve", "-data", t.TempDir(), "-zone", "apps.test",
			"-http", httpAddr, "-http-mode", "serve", "-https", "", "-dns", "",
			"-management", mgmt, "-bus-listen", "127.0.0.1:0",
		}, &bytes.Buffer{}, &logs)
	}()
	testutil.WaitFor(t, 20*time.Second, readyzIs(t, mgmt, done, &logs, 200), "serve never became ready")
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/", nil)
	req.Host = "nope.apps.test"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var line map[string]any
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, "nope.apps.test") {
				return json.Unmarshal([]byte(l), &line) == nil
			}
		}
		return false
	}, "no access log line for the request:\n"+logs.String())
	d, ok := line["duration"].(string)
	if !ok {
		t.Fatalf("duration is %T %v, want Go duration text", line["duration"], line["duration"])
	}
	if _, err := time.ParseDuration(d); err != nil {
		t.Errorf("duration %q: %v", d, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// readyzIs returns a poll for testutil.WaitFor: whether serve's /readyz on
// mgmt answers status; it fails the test if serve has ended (done).
func readyzIs(t *testing.T, mgmt string, done <-chan error, logs fmt.Stringer, status int) func() bool {
	return func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, logs.String())
		default:
		}
		res, err := http.Get("http://" + mgmt + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == status
	}
}

// TestServeStartRefusalsNameTheFlag: a value refused once the
// configuration has loaded (a key file, a listener that cannot bind, the
// data directory, the bus URL) names the flag it came from, as a value
// Validate refuses does (docs/config.md): a flag wins over the file, so
// the key alone could send the operator to a file that is right.
func TestServeStartRefusalsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	openKey := filepath.Join(dir, "cluster.key")
	if _, _, err := runCmd(t, "keygen", "-out", openKey); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openKey, 0o644); err != nil {
		t.Fatal(err)
	}
	noKeys := filepath.Join(dir, "issuer.jwks")
	file := filepath.Join(dir, "file")
	for _, p := range []string{noKeys, file} {
		if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-cluster-key", openKey}, "config: cluster.key (-cluster-key): "},
		{[]string{"-issuer", "https://id.test=" + noKeys}, "config: auth.issuers[0].keys_file (-issuer): "},
		{[]string{"-data", file}, "config: data_dir (-data): "},
		{[]string{"-bus", "nats://127.0.0.1:99999"}, "config: bus.url (-bus): "},
		{[]string{"-http", busy.Addr().String()}, "config: http.addr (-http): "},
	} {
		args := append([]string{"serve", "-data", t.TempDir(), "-http", "127.0.0.1:0", "-https", "127.0.0.1:0",
			"-dns", "127.0.0.1:0", "-management", "127.0.0.1:0", "-bus-listen", "127.0.0.1:0"}, c.args...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := run(ctx, args, &bytes.Buffer{}, &bytes.Buffer{})
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error beginning %q", c.args, err, c.want)
		}
	}
}

// TestServeEmptyConfigFile: a -config or GATEHOUSE_CONFIG file that
// holds no settings (empty, or only comments: a deploy that failed, a
// write cut short) stops serve at once, exit 1, naming the file, with
// nothing started: the gateway ran on its defaults without a word. No
// file at all is still the defaults, and so is a file of {}.
func TestServeEmptyConfigFile(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct{ name, body string }{
		{"empty", ""},
		{"comments", "# gatehouse.yaml\n# zone: apps.example.com\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, c.name+".yaml")
			if err := os.WriteFile(file, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			// Loopback listeners and a data_dir of its own: the code
			// before the fix started the gateway here.
			data := filepath.Join(dir, fmt.Sprintf("data-%d", i))
			args := []string{"serve", "-config", file, "-data", data,
				"-http", "127.0.0.1:0", "-https", "127.0.0.1:0", "-dns", "127.0.0.1:0",
				"-management", "127.0.0.1:0", "-bus-listen", "127.0.0.1:0"}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			err := run(ctx, args, io.Discard, &stderr)
			want := "config: " + file + `: holds no settings (the file is empty, or only comments): write its settings, or {} to start on the defaults (or give -config "" for no file)`
			if err == nil || err.Error() != want || exitCode(err, io.Discard) != 1 {
				t.Fatalf("serve -config %s: %v\nwant %s, exit 1", c.name, err, want)
			}
			if stderr.Len() != 0 {
				t.Errorf("serve logged before refusing: %s", stderr.String())
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("data_dir made by a start that was refused: %v", err)
			}
		})
	}
}
