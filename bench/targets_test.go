//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"text/template"
	"time"
)

// TestPeerFields checks that -peer-fields puts the same five rate-limit
// fields, with the same bytes, and gatehouse's context fields into both
// peers' L7 configurations, and that without it neither adds any. (Both
// configurations were also run against a backend that printed what it
// received, session 27: every field arrived, the request id alike in all
// three places.)
func TestPeerFields(t *testing.T) {
	if c, err := parseFlags([]string{"-peer-fields"}); err != nil || !c.peerFields {
		t.Fatalf("-peer-fields: %+v, %v", c, err)
	}
	if c, _ := parseFlags(nil); c.peerFields {
		t.Fatal("-peer-fields is on by default: the default run must measure the proxies as configured")
	}
	render := func(tmpl *template.Template, fields []field) string {
		var b bytes.Buffer
		if err := tmpl.Execute(&b, map[string]any{"Fields": fields, "Context": fields != nil, "Cores": 2, "MaxConns": 10, "NoFile": 100}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, f := range peerRateFields {
		if strings.ContainsAny(f.Value, `'\`) {
			t.Errorf("%s: %q cannot be single-quoted in both configurations", f.Name, f.Value)
		}
	}
	// The values gatehouse's limit layer writes for a first request under
	// the harness's budget.
	want := map[string]string{
		"X-RateLimit-Limit":     "1000000000",
		"X-RateLimit-Remaining": "999999999",
		"X-RateLimit-Reset":     "0",
		"RateLimit-Policy":      `"app";q=1000000000;w=60`,
		"RateLimit":             `"app";r=999999999;t=0`,
	}
	for _, f := range peerRateFields {
		if want[f.Name] != f.Value {
			t.Errorf("%s: %q, want %q", f.Name, f.Value, want[f.Name])
		}
		delete(want, f.Name)
	}
	if len(want) > 0 {
		t.Errorf("peer fields lack %v", want)
	}
	// gatehouse's context fields (DESIGN §2): six to the host, two on the
	// response, the request id the same in all three places.
	context := map[string][]string{
		"nginx": {
			"proxy_set_header X-Forwarded-Host $host;", "proxy_set_header X-Request-Id $request_id;",
			"proxy_set_header X-Gatehouse-App-Id app;", "proxy_set_header X-Gatehouse-Client-Ip $remote_addr;",
			"proxy_set_header X-Gatehouse-Cluster bench;", "proxy_set_header X-Gatehouse-Request-Id $request_id;",
			"add_header X-Request-Id $request_id always;", "add_header X-Gatehouse-Cluster bench always;",
		},
		"haproxy": {
			"http-request set-var(txn.rid) uuid()",
			"http-request set-header X-Forwarded-Host %[req.hdr(host)]", "http-request set-header X-Request-Id %[var(txn.rid)]",
			"http-request set-header X-Gatehouse-App-Id app", "http-request set-header X-Gatehouse-Client-Ip %[src]",
			"http-request set-header X-Gatehouse-Cluster bench", "http-request set-header X-Gatehouse-Request-Id %[var(txn.rid)]",
			"http-response set-header X-Request-Id %[var(txn.rid)]", "http-response set-header X-Gatehouse-Cluster bench",
		},
	}
	for _, tc := range []struct {
		name string
		tmpl *template.Template
		line func(field) string
	}{
		{"nginx", nginxConf, func(f field) string { return "add_header " + f.Name + " '" + f.Value + "' always;" }},
		{"haproxy", haproxyConf, func(f field) string { return "http-response set-header " + f.Name + " '" + f.Value + "'" }},
	} {
		with, without := render(tc.tmpl, peerRateFields), render(tc.tmpl, nil)
		for _, f := range peerRateFields {
			if !strings.Contains(with, tc.line(f)) {
				t.Errorf("%s with -peer-fields lacks %q:\n%s", tc.name, tc.line(f), with)
			}
			if strings.Contains(without, f.Name) {
				t.Errorf("%s without -peer-fields adds %s", tc.name, f.Name)
			}
		}
		for _, line := range context[tc.name] {
			if !strings.Contains(with, line) {
				t.Errorf("%s with -peer-fields lacks %q:\n%s", tc.name, line, with)
			}
		}
		if strings.Contains(without, "X-Gatehouse") || strings.Contains(without, "X-Request-Id") {
			t.Errorf("%s without -peer-fields adds context fields:\n%s", tc.name, without)
		}
	}
}

// TestTargetGetsFreshPortsWhenOneWasTaken starts nginx and HAProxy with a
// first address that another socket holds, as happens when a port
// freeAddr released is taken (a busy loopback's outgoing connections pick
// ephemeral ports too) before the proxy binds it: the target must start on
// fresh ports, not be lost for the whole run.
func TestTargetGetsFreshPortsWhenOneWasTaken(t *testing.T) {
	certFile, keyFile, roots, err := writeCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	oneKiB := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, smallBody)) })
	backend := httptest.NewServer(oneKiB)
	defer backend.Close()
	backendTLS := httptest.NewUnstartedServer(oneKiB) // the passthrough check's end
	backendTLS.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	backendTLS.StartTLS()
	defer backendTLS.Close()
	for _, tc := range []struct {
		name  string
		start func(context.Context, *env) *target
	}{{"nginx", startNginx}, {"haproxy", startHAProxy}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.name); err != nil {
				t.Skip(tc.name + " not installed")
			}
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o755); err != nil { // nginx workers run as nobody
				t.Fatal(err)
			}
			calls := 0
			ps := &procs{}
			defer ps.stopAll()
			e := &env{dir: dir, ps: ps, cores: 1, maxConns: 64, noFile: 4096, roots: roots, certFile: certFile, keyFile: keyFile,
				backendHTTP: backend.Listener.Addr().String(), backendTLS: backendTLS.Listener.Addr().String(),
				pickAddrs: func(n int) ([]string, error) {
					calls++
					a, err := freeAddrs(n)
					if calls == 1 && err == nil {
						a[0] = taken.Addr().String()
					}
					return a, err
				}}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tg := tc.start(ctx, e)
			if tg.err != nil || tg.http == "" {
				t.Fatalf("%s with its first port taken: %v", tc.name, tg.err)
			}
			if tg.http == taken.Addr().String() {
				t.Fatalf("%s reports the taken address %s", tc.name, tg.http)
			}
			if err := checkHTTP(tg.http); err != nil {
				t.Fatal(err)
			}
			// nginx pipes by SNI only with Debian's stream module.
			wantTLS := tc.name != "nginx" || fileExists(nginxStreamModule)()
			if tg.https == "" || (tg.tls == "") == wantTLS {
				t.Errorf("%s: L7 over TLS at %q (%v), passthrough at %q (%v)", tc.name, tg.https, tg.httpsErr, tg.tls, tg.tlsErr)
			}
		})
	}
}
