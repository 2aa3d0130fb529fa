//go:build linux

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Names every target routes: the L7 app by Host, the passthrough app by
// SNI. Each proxy refuses any other name (404, or no pipe).
const (
	appHost = "app.bench.test"
	tlsHost = "tls.bench.test"
)

// env is what every target is started with.
type env struct {
	dir         string // the run's temp dir: configs, logs, keys
	ps          *procs
	backendHTTP string // the backend's plaintext address
	backendTLS  string // the backend's TLS address
	certFile    string // a certificate and key for appHost, for proxies that terminate TLS
	keyFile     string
	cores       int
	maxConns    int // connections a proxy must accept at once (idle test + margin)
	noFile      int // RLIMIT_NOFILE the children inherit
	roots       *x509.CertPool
	// pickAddrs hands out loopback addresses for a target's listeners;
	// nil is freeAddrs. (A test gives a taken one.)
	pickAddrs func(n int) ([]string, error)
	// peerFields are fields nginx and HAProxy add to every L7 response
	// (-peer-fields); none by default. With them the peers also add
	// gatehouse's context fields, both ways (the templates' Context).
	peerFields []field
}

// field is one response field a peer's configuration adds.
type field struct{ Name, Value string }

// budget is the rate limit the harness gives its apps on gatehouse (per
// 60 s window): large enough never to refuse.
const budget = 1_000_000_000

// peerRateFields are the rate-limit fields gatehouse sends on every
// response under that budget (DESIGN §2 step 6), with the remaining count
// at its first value: with -peer-fields the peers send the same bytes, so
// what remains between them is the proxies' own work. No value holds a
// quote or backslash, which both configurations' single-quoted strings
// would take apart.
var peerRateFields = []field{
	{"X-RateLimit-Limit", strconv.Itoa(budget)},
	{"X-RateLimit-Remaining", strconv.Itoa(budget - 1)},
	{"X-RateLimit-Reset", "0"},
	{"RateLimit-Policy", `"app";q=` + strconv.Itoa(budget) + ";w=60"},
	{"RateLimit", `"app";r=` + strconv.Itoa(budget-1) + ";t=0"},
}

// target is one thing wrk and the TLS clients point at.
type target struct {
	name string
	http string // L7 address; empty when L7 is unavailable (err says why)
	tls  string // passthrough address; empty when unavailable (tlsErr says why)
	// https is the L7 address over TLS (the proxy terminates it); empty
	// when unavailable (httpsErr says why).
	https    string
	httpsErr error
	// proc is the proxy process whose CPU and memory are measured (with its
	// children); nil for the direct backend.
	proc   *proc
	err    error
	tlsErr error
	// floor marks a Go floor (bench/floor.go): L7 plaintext only, and no
	// idle test (it holds a backend connection and 72 KiB per client).
	floor bool
	// maxIdle is the most connections the target was configured to hold
	// at once; 0 means no limit below the idle test's.
	maxIdle int
}

// freeAddr returns a free loopback address. The port is released before
// the caller's process binds it; on a quiet loopback that race is benign.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// addrs is n addresses for a target's listeners.
func (e *env) addrs(n int) ([]string, error) {
	if e.pickAddrs != nil {
		return e.pickAddrs(n)
	}
	return freeAddrs(n)
}

// portTaken reports whether err says a listener could not bind: the
// port freeAddr released was taken before the process bound it (nginx and
// HAProxy say "Address already in use", Go "address already in use").
func portTaken(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "address already in use")
}

// withFreshPorts starts a target with start, which picks its ports
// afresh each call, and again (three attempts in all) while it fails
// only because a port was taken: on a busy loopback, where outgoing
// connections take ephemeral ports too, that race is not rare, and a
// target lost to it would be missing from the whole run.
func withFreshPorts(ctx context.Context, start func() *target) *target {
	for attempt := 1; ; attempt++ {
		t := start()
		if t.err == nil || attempt == 3 || ctx.Err() != nil || !portTaken(t.err) {
			return t
		}
		if t.proc != nil {
			t.proc.stop(5 * time.Second)
		}
		logf("%s: a port was taken before it bound it; again with fresh ports (%s)", t.name, oneLine(t.err))
	}
}

func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// checkHTTP makes one request for appHost at addr and wants the backend's
// 1 KiB answer.
func checkHTTP(addr string) error { return checkBody(addr, false, "/", smallBody) }

// checkHTTPS is checkHTTP over TLS, without SNI or verification, as wrk
// connects to an address: the proxy terminates TLS with whatever
// certificate it has and routes by Host.
func checkHTTPS(addr string) error { return checkBody(addr, true, "/", smallBody) }

// checkBody GETs path for appHost at addr and wants a 200 with a body of
// exactly want bytes: a proxy that cut or padded the L7 test's answer
// would make its figures meaningless.
func checkBody(addr string, overTLS bool, path string, want int) error {
	tr := &http.Transport{DisableKeepAlives: true}
	if overTLS {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1, as wrk
	}
	url := scheme(overTLS) + "://" + addr + path
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = appHost
	resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, int64(want)+1))
	if err != nil || resp.StatusCode != 200 || n != int64(want) {
		return fmt.Errorf("GET %s (Host %s): status %d, %d bytes (want %d), %v", url, appHost, resp.StatusCode, n, want, err)
	}
	return nil
}

// startHTTPSPart checks the L7-over-TLS address of a target.
func (t *target) startHTTPSPart(ctx context.Context, addr string) {
	if err := waitReady(ctx, t.proc, func() error { return checkHTTPS(addr) }); err != nil {
		t.httpsErr = err
		return
	}
	t.https = addr
}

// checkTLS handshakes with tlsHost at addr and wants the backend's own
// certificate: proof the proxy piped the connection rather than
// terminating it.
func checkTLS(addr string, roots *x509.CertPool) error {
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: tlsHost, RootCAs: roots})
	if err != nil {
		return fmt.Errorf("TLS to %s (SNI %s): %w", addr, tlsHost, err)
	}
	return c.Close()
}

func waitReady(ctx context.Context, p *proc, check func() error) error {
	return waitFor(ctx, 20*time.Second, func() error {
		if done, err := p.exited(); done {
			return permanent{fmt.Errorf("%s exited (%v):\n%s", p.name, err, p.tail())}
		}
		return check()
	})
}

// startTLSPart checks the passthrough address of a target that has one.
func (t *target) startTLSPart(ctx context.Context, e *env, addr string) {
	if err := waitReady(ctx, t.proc, func() error { return checkTLS(addr, e.roots) }); err != nil {
		t.tlsErr = err
		return
	}
	t.tls = addr
}

var nginxConf = template.Must(template.New("nginx").Parse(`# generated by go run ./bench
daemon off;
master_process on;
worker_processes {{.Cores}};
worker_rlimit_nofile {{.NoFile}};
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/nginx-error.log error;
{{if .Stream}}load_module {{.Stream}};{{end}}
events {
    worker_connections {{.MaxConns}};
}
http {
    access_log off;
    client_body_temp_path {{.Dir}}/nginx-tmp/body;
    proxy_temp_path {{.Dir}}/nginx-tmp/proxy;
    fastcgi_temp_path {{.Dir}}/nginx-tmp/fastcgi;
    uwsgi_temp_path {{.Dir}}/nginx-tmp/uwsgi;
    scgi_temp_path {{.Dir}}/nginx-tmp/scgi;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
    ssl_certificate {{.Cert}};
    ssl_certificate_key {{.Key}};
    ssl_protocols TLSv1.2 TLSv1.3; # 1.22's default stops at TLSv1.2; the others offer 1.3
    upstream app {
        server {{.Backend}};
        keepalive 128;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }
    server {
        listen {{.HTTP}} default_server;
        server_name _;
        return 404;
    }
    server {
        listen {{.HTTP}};
        listen {{.HTTPS}} ssl http2;
        server_name {{.AppHost}};
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $scheme;
{{- if .Context}}
            proxy_set_header X-Forwarded-Host $host;
            proxy_set_header X-Request-Id $request_id;
            proxy_set_header X-Gatehouse-App-Id app;
            proxy_set_header X-Gatehouse-Client-Ip $remote_addr;
            proxy_set_header X-Gatehouse-Cluster bench;
            proxy_set_header X-Gatehouse-Request-Id $request_id;
            add_header X-Request-Id $request_id always;
            add_header X-Gatehouse-Cluster bench always;
{{- end}}
{{- range .Fields}}
            add_header {{.Name}} '{{.Value}}' always;
{{- end}}
        }
    }
}
{{if .Stream}}stream {
    map $ssl_preread_server_name $tls_upstream {
        {{.TLSHost}} {{.BackendTLS}};
        default 127.0.0.1:9;
    }
    server {
        listen {{.TLS}};
        ssl_preread on;
        proxy_pass $tls_upstream;
    }
}{{end}}
`))

func startNginx(ctx context.Context, e *env) *target {
	return withFreshPorts(ctx, func() *target { return startNginxOnce(ctx, e) })
}

func startNginxOnce(ctx context.Context, e *env) *target {
	t := &target{name: "nginx"}
	addrs, err := e.addrs(3)
	if err != nil {
		t.err = err
		return t
	}
	stream := ""
	if fileExists(nginxStreamModule)() {
		stream = nginxStreamModule
	}
	conf := filepath.Join(e.dir, "nginx.conf")
	if err := os.MkdirAll(filepath.Join(e.dir, "nginx-tmp"), 0o755); err != nil {
		t.err = err
		return t
	}
	if err := writeTemplate(conf, nginxConf, map[string]any{
		"Cores": e.cores, "NoFile": max(e.noFile, e.maxConns+1024), "MaxConns": e.maxConns + 1024, "Dir": e.dir,
		"Stream": stream, "Backend": e.backendHTTP, "BackendTLS": e.backendTLS,
		"HTTP": addrs[0], "TLS": addrs[1], "HTTPS": addrs[2], "AppHost": appHost, "TLSHost": tlsHost,
		"Cert": e.certFile, "Key": e.keyFile, "Fields": e.peerFields, "Context": e.peerFields != nil,
	}); err != nil {
		t.err = err
		return t
	}
	bin, _ := exec.LookPath("nginx")
	if out, err := exec.CommandContext(ctx, bin, "-t", "-q", "-c", conf, "-p", e.dir).CombinedOutput(); err != nil {
		t.err = fmt.Errorf("nginx -t: %v: %s", err, strings.TrimSpace(string(out)))
		return t
	}
	t.proc, t.err = e.ps.start(e.dir, "nginx", bin, "-c", conf, "-p", e.dir)
	if t.err != nil {
		return t
	}
	if t.err = waitReady(ctx, t.proc, func() error { return checkHTTP(addrs[0]) }); t.err != nil {
		return t
	}
	t.http = addrs[0]
	t.startHTTPSPart(ctx, addrs[2])
	if stream == "" {
		t.tlsErr = fmt.Errorf("nginx stream module missing (%s; package libnginx-mod-stream)", nginxStreamModule)
		return t
	}
	t.startTLSPart(ctx, e, addrs[1])
	return t
}

// startFloor starts a Go floor, `bench floor -mode go|epoll|lane|bytes`, in front of
// the backend: L7 plaintext only.
func startFloor(ctx context.Context, e *env, self, name string) *target {
	return withFreshPorts(ctx, func() *target { return startFloorOnce(ctx, e, self, name) })
}

func startFloorOnce(ctx context.Context, e *env, self, name string) *target {
	t := &target{name: name, floor: true} // no tls or https address: those phases pass it by
	addrs, err := e.addrs(1)
	if err != nil {
		t.err = err
		return t
	}
	addr := addrs[0]
	mode := strings.TrimPrefix(name, "floor-")
	if t.proc, t.err = e.ps.start(e.dir, name, self, "floor", "-mode", mode, "-listen", addr, "-backend", e.backendHTTP); t.err != nil {
		return t
	}
	if t.err = waitReady(ctx, t.proc, func() error { return checkHTTP(addr) }); t.err != nil {
		return t
	}
	t.http = addr
	return t
}

var haproxyConf = template.Must(template.New("haproxy").Parse(`# generated by go run ./bench
global
    maxconn {{.MaxConns}}
    ulimit-n {{.NoFile}}
    nbthread {{.Cores}}
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-request 10s
    timeout http-keep-alive 120s
    option http-keep-alive
    http-reuse always
frontend web
    bind {{.HTTP}}
    maxconn {{.MaxConns}}
    option forwardfor
    http-request set-header X-Forwarded-Proto http
    acl app_host req.hdr(host),field(1,:) -i {{.AppHost}}
    use_backend app if app_host
    default_backend notfound
frontend webtls
    bind {{.HTTPS}} ssl crt {{.PEM}} alpn h2,http/1.1
    maxconn {{.MaxConns}}
    option forwardfor
    http-request set-header X-Forwarded-Proto https
    acl app_host req.hdr(host),field(1,:) -i {{.AppHost}}
    use_backend app if app_host
    default_backend notfound
backend app
    server b1 {{.Backend}}
{{- if .Context}}
    http-request set-var(txn.rid) uuid()
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    http-request set-header X-Request-Id %[var(txn.rid)]
    http-request set-header X-Gatehouse-App-Id app
    http-request set-header X-Gatehouse-Client-Ip %[src]
    http-request set-header X-Gatehouse-Cluster bench
    http-request set-header X-Gatehouse-Request-Id %[var(txn.rid)]
    http-response set-header X-Request-Id %[var(txn.rid)]
    http-response set-header X-Gatehouse-Cluster bench
{{- end}}
{{- range .Fields}}
    http-response set-header {{.Name}} '{{.Value}}'
{{- end}}
backend notfound
    http-request deny deny_status 404
frontend tls
    mode tcp
    bind {{.TLS}}
    maxconn {{.MaxConns}}
    tcp-request inspect-delay 5s
    tcp-request content accept if { req_ssl_hello_type 1 }
    use_backend tlsapp if { req_ssl_sni -i {{.TLSHost}} }
backend tlsapp
    mode tcp
    server t1 {{.BackendTLS}}
`))

func startHAProxy(ctx context.Context, e *env) *target {
	return withFreshPorts(ctx, func() *target { return startHAProxyOnce(ctx, e) })
}

func startHAProxyOnce(ctx context.Context, e *env) *target {
	t := &target{name: "haproxy", maxIdle: min(e.maxConns, (e.noFile-1200)/2)}
	addrs, err := e.addrs(3)
	if err != nil {
		t.err = err
		return t
	}
	// HAProxy wants certificate and key in one file.
	pem := filepath.Join(e.dir, "haproxy.pem")
	if err := concatFiles(pem, e.certFile, e.keyFile); err != nil {
		t.err = err
		return t
	}
	conf := filepath.Join(e.dir, "haproxy.cfg")
	if err := writeTemplate(conf, haproxyConf, map[string]any{
		// HAProxy reserves two FDs per connection and refuses to start
		// when RLIMIT_NOFILE cannot cover maxconn, so maxconn is capped.
		"Cores": e.cores, "MaxConns": t.maxIdle + 512, "NoFile": e.noFile, "Backend": e.backendHTTP, "BackendTLS": e.backendTLS,
		"HTTP": addrs[0], "TLS": addrs[1], "HTTPS": addrs[2], "PEM": pem, "AppHost": appHost, "TLSHost": tlsHost,
		"Fields": e.peerFields, "Context": e.peerFields != nil,
	}); err != nil {
		t.err = err
		return t
	}
	bin, _ := exec.LookPath("haproxy")
	if out, err := exec.CommandContext(ctx, bin, "-c", "-q", "-f", conf).CombinedOutput(); err != nil {
		t.err = fmt.Errorf("haproxy -c: %v: %s", err, strings.TrimSpace(string(out)))
		return t
	}
	t.proc, t.err = e.ps.start(e.dir, "haproxy", bin, "-db", "-f", conf)
	if t.err != nil {
		return t
	}
	if t.err = waitReady(ctx, t.proc, func() error { return checkHTTP(addrs[0]) }); t.err != nil {
		return t
	}
	t.http = addrs[0]
	t.startHTTPSPart(ctx, addrs[2])
	t.startTLSPart(ctx, e, addrs[1])
	return t
}

func concatFiles(dst string, srcs ...string) error {
	var all []byte
	for _, src := range srcs {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		all = append(all, b...)
	}
	return os.WriteFile(dst, all, 0o600)
}

func writeTemplate(path string, t *template.Template, data any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := t.Execute(f, data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
