//go:build linux

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/nats-io/nats.go"
)

// The backend is the fixed server every target proxies to: the harness
// re-executes itself as `bench backend ...`, so it is a process of its own
// whose CPU is not the harness's. It serves:
//
//	GET /          1 KiB of text, keep-alive (the L7 test)
//	GET /big?mb=N  N MiB (default 1024) from a fixed buffer (the TLS download test)
//
// on -http in plaintext and on -tls with its own certificate (the
// passthrough test: the proxies never hold its key). With -bus it also
// embeds the gatehouse host package and announces itself as verified-able
// hosts for gatehouse, so gatehouse reaches it directly with no sidecar
// hop, exactly as nginx and HAProxy do.

const smallBody = 1024

// maxBody bounds -body, the L7 test's response size.
const maxBody = 16 << 20

// bodyPath is the backend path whose answer is n bytes: "/" for the 1 KiB
// the L7 test asks for, /body/{n} for any other size.
func bodyPath(n int) string {
	if n == smallBody {
		return "/"
	}
	return "/body/" + strconv.Itoa(n)
}

var (
	small = func() []byte {
		b := make([]byte, smallBody)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		b[len(b)-1] = '\n'
		return b
	}()
	chunk = make([]byte, 256<<10)
)

func backendHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"text/plain"}
		h["Content-Length"] = []string{"1024"}
		w.Write(small)
	})
	mux.HandleFunc("GET /body/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 1 || n > maxBody {
			http.Error(w, fmt.Sprintf("body size: want 1-%d", maxBody), http.StatusBadRequest)
			return
		}
		h := w.Header()
		h["Content-Type"] = []string{"text/plain"}
		h["Content-Length"] = []string{strconv.Itoa(n)}
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		mb, err := strconv.Atoi(r.URL.Query().Get("mb"))
		if err != nil || mb <= 0 || mb > 1<<14 {
			mb = 1024
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(mb<<20))
		for i := 0; i < mb<<20/len(chunk); i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	return mux
}

type backendFlags struct {
	http, tls, cert, key       string
	bus, cluster, hostKey, app string
	tlsApp                     string
}

func runBackend(args []string) error {
	var f backendFlags
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	fs.StringVar(&f.http, "http", "127.0.0.1:0", "plaintext listen address")
	fs.StringVar(&f.tls, "tls", "", "TLS listen address (needs -cert, -key)")
	fs.StringVar(&f.cert, "cert", "", "PEM certificate for -tls")
	fs.StringVar(&f.key, "key", "", "PEM key for -tls")
	fs.StringVar(&f.bus, "bus", "", "gatehouse bus URLs, comma-separated: announce as a host of each gatehouse")
	fs.StringVar(&f.cluster, "cluster", "", "gatehouse cluster id")
	fs.StringVar(&f.hostKey, "host-key", "", "host private key (PKCS#8 PEM)")
	fs.StringVar(&f.app, "app", "", "app the plaintext listener serves, as host bench-http")
	fs.StringVar(&f.tlsApp, "tls-app", "", "passthrough app the TLS listener serves, as host bench-tls")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	quiet := log.New(io.Discard, "", 0)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	httpH, tlsH := backendHandler(), backendHandler()
	var hosts []*host.Host
	if f.bus != "" {
		key, err := host.LoadKey(f.hostKey)
		if err != nil {
			return fmt.Errorf("backend: %w", err)
		}
		// One gatehouse per bus (two in an A/B run), all trusting the same
		// key: the challenge answer is a signature of the host's id and
		// address, so the first host's handler answers for every bus.
		for i, bus := range strings.Split(f.bus, ",") {
			nc, err := nats.Connect(bus, nats.MaxReconnects(-1), nats.Name("bench-backend"))
			if err != nil {
				return fmt.Errorf("backend: bus %s: %w", bus, err)
			}
			defer nc.Close()
			add := func(id, app, addr, scheme string, h *http.Handler) error {
				hh, err := host.New(host.Options{Conn: nc, Cluster: f.cluster, HostID: id, Key: key,
					Apps: []string{app}, Addr: addr, Scheme: scheme, Logger: logger})
				if err != nil {
					return fmt.Errorf("backend: %w", err)
				}
				if i == 0 {
					*h = hh.Wrap(*h)
				}
				hosts = append(hosts, hh)
				return nil
			}
			if f.app != "" {
				if err := add("bench-http", f.app, f.http, host.SchemeHTTP, &httpH); err != nil {
					return err
				}
			}
			if f.tlsApp != "" {
				if err := add("bench-tls", f.tlsApp, f.tls, host.SchemeTLS, &tlsH); err != nil {
					return err
				}
			}
		}
	}

	var servers []*http.Server
	errc := make(chan error, 2)
	ln, err := net.Listen("tcp", f.http)
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	hs := &http.Server{Handler: httpH, ErrorLog: quiet, IdleTimeout: 300 * time.Second, ReadHeaderTimeout: 10 * time.Second}
	servers = append(servers, hs)
	go func() { errc <- hs.Serve(ln) }()
	if f.tls != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return fmt.Errorf("backend: %w", err)
		}
		tln, err := net.Listen("tcp", f.tls)
		if err != nil {
			return fmt.Errorf("backend: %w", err)
		}
		ts := &http.Server{Handler: tlsH, ErrorLog: quiet, IdleTimeout: 300 * time.Second,
			TLSConfig:    &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}},
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only, like wrk
		}
		servers = append(servers, ts)
		go func() { errc <- ts.ServeTLS(tln, "", "") }()
	}

	var wg sync.WaitGroup
	hctx, hcancel := context.WithCancel(context.Background())
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Run(hctx); err != nil {
				fmt.Fprintln(os.Stderr, "backend:", err)
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	hcancel() // leave the bus first, then stop serving
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		s.Shutdown(sctx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("backend: %w", err)
	}
	return nil
}
