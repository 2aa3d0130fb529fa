//go:build linux

package main

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
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
)

// The gatehouse target is the real binary, built from this checkout and
// run like an operator would: `gatehouse serve` with the embedded bus, the
// apps and host keys put through the control API, and the backend itself
// announcing on the bus as two hosts (host package embedded, no sidecar
// hop): bench-http serves app "app" over plain HTTP, bench-tls serves the
// passthrough app "tls" and terminates TLS itself.
//
// The full L7 chain stays on: routing, hygiene, CORS, rate limit (with a
// budget that never refuses), policy, affinity, context headers, metrics.
// Only the log level is "error", as every peer runs without access logs.

const (
	benchZone    = "bench.test"
	benchCluster = "bench"
)

// gatehouseSetup is what the backend needs to announce itself to a
// running gatehouse (with the hosts' key, e.hostKeyFile, which every
// gatehouse target trusts).
type gatehouseSetup struct {
	bus string // nats://addr of the embedded bus
}

// hostKeyFile is the backend's host key: made by the first gatehouse
// target, loaded by a second (-gatehouse-b), so that one backend is a
// verified host of both.
func (e *env) hostKeyFile() string { return filepath.Join(e.dir, "host.key") }

func hostKey(e *env) (ed25519.PrivateKey, error) {
	if key, err := host.LoadKey(e.hostKeyFile()); err == nil {
		return key, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := host.GenerateKey()
	if err != nil {
		return nil, err
	}
	return key, host.WriteKey(e.hostKeyFile(), key)
}

// hasFlag reports whether bin's serve subcommand knows -name: an A/B run
// may measure a build older than a flag the harness sets.
func hasFlag(ctx context.Context, bin, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "serve", "-h").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "-"+name {
			return true
		}
	}
	return false
}

// buildGatehouse builds ./cmd/gatehouse from the module at root.
func buildGatehouse(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "gatehouse")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gatehouse")
	cmd.Dir = root
	// An interrupt kills the go command, which then cannot remove its
	// work dir: that dir goes in the run's temp dir, removed with it. And
	// the go command leads a group of its own, so that the compilers and
	// linker it started die with it and do not write on into the temp dir
	// as it is removed.
	cmd.Env = append(os.Environ(), "GOTMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gatehouse: %v\n%s", err, lastLines(string(out), 8))
	}
	return bin, nil
}

// startGatehouse starts the gateway as target name and configures it;
// the target is usable only after the backend has announced
// (finishGatehouse).
func startGatehouse(ctx context.Context, e *env, name, bin string) (*target, *gatehouseSetup, error) {
	t := &target{name: name}
	addrs, err := freeAddrs(4)
	if err != nil {
		return t, nil, err
	}
	httpAddr, httpsAddr, mgmt, bus := addrs[0], addrs[1], addrs[2], addrs[3]
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	data := filepath.Join(e.dir, name+"-data")
	if err := os.RemoveAll(data); err != nil { // what an earlier attempt left
		return t, nil, err
	}
	args := []string{"serve",
		"-data", data, "-zone", benchZone, "-cluster", benchCluster,
		"-http", httpAddr, "-http-mode", "serve", "-https", httpsAddr, "-dns", "",
		"-management", mgmt, "-bus-listen", bus, "-control-token", token,
		"-limits-requests", "1000000000", "-log-level", "error"}
	if hasFlag(ctx, bin, "listeners-max-connections") {
		// As nginx's worker_connections and HAProxy's maxconn: the idle
		// test's connections and a margin, whatever RLIMIT_NOFILE is.
		// (Builds before the key, measured in an A/B, have no cap.)
		args = append(args, "-listeners-max-connections", strconv.Itoa(e.maxConns+1024))
	}
	p, err := e.ps.start(e.dir, name, bin, args...)
	if err != nil {
		return t, nil, err
	}
	t.proc = p
	api := &controlAPI{base: "http://" + mgmt, token: token}
	if err := waitReady(ctx, p, func() error { return api.do("GET", "/readyz", nil) }); err != nil {
		return t, nil, fmt.Errorf("not ready: %w", err)
	}
	huge := map[string]any{"requests": budget, "window": "60s"}
	for _, app := range []struct{ id, mode string }{{"app", "http"}, {"tls", "passthrough"}} {
		body := map[string]any{"id": app.id, "mode": app.mode, "status": "active", "rate_limit": huge}
		if err := api.do("PUT", "/api/v3/apps/"+app.id, body); err != nil {
			return t, nil, err
		}
	}
	key, err := hostKey(e)
	if err != nil {
		return t, nil, err
	}
	pub := host.PublicKeyString(key.Public().(ed25519.PublicKey))
	for id, app := range map[string]string{"bench-http": "app", "bench-tls": "tls"} {
		body := map[string]any{"public_key": pub, "apps": []string{app}}
		if err := api.do("PUT", "/api/v3/hosts/keys/"+id, body); err != nil {
			return t, nil, err
		}
	}
	t.http, t.tls = httpAddr, httpsAddr // confirmed by finishGatehouse
	return t, &gatehouseSetup{bus: "nats://" + bus}, nil
}

// finishGatehouse waits until the backend's hosts are verified and both
// apps route through gatehouse.
func finishGatehouse(ctx context.Context, e *env, t *target) {
	httpAddr, tlsAddr := t.http, t.tls
	t.http, t.tls = "", ""
	if err := waitReady(ctx, t.proc, func() error { return checkHTTP(httpAddr) }); err != nil {
		t.err = fmt.Errorf("app never routed (host not verified?): %w", err)
		return
	}
	t.http = httpAddr
	t.startHTTPSPart(ctx, tlsAddr) // one https listener: SNI tls.bench.test pipes, anything else terminates
	t.startTLSPart(ctx, e, tlsAddr)
}

// controlAPI is a minimal client of gatehouse's control API.
type controlAPI struct{ base, token string }

func (c *controlAPI) do(method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}
