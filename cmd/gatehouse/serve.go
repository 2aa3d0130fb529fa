package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/gatehouse"
	"github.com/gatehouse-dev/gatehouse/internal/gcfloor"
)

// runServe loads the configuration (file, GATEHOUSE_* variables, flags)
// and runs the gateway until ctx ends (SIGINT/SIGTERM), draining first.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(args, os.Environ())
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintf(stdout, "usage: gatehouse serve [-config gatehouse.yaml] [flags]\n\nEvery key is a flag and a GATEHOUSE_* variable; flags win over variables,\nvariables over the file. See docs/config.md.\n\n")
		config.Usage(stdout)
		return flag.ErrHelp
	}
	if err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.Log.SlogLevel())
	defer ignoreHangup(logger)()
	// A log whose reader went away (serve 2>&1 | logger, a container
	// shim restarted) must not end the gateway: Go's runtime kills a
	// process writing to a broken pipe on fd 1 or 2 with SIGPIPE unless
	// the signal is ignored, with no drain and every connection cut.
	// Ignored, the write fails and the gateway serves on, as nginx does.
	// Sockets are not concerned: their writes return EPIPE either way.
	signal.Ignore(syscall.SIGPIPE)
	// GOGC is the process's: the floor belongs to the process, not to
	// the gateway (tests run many gateways in one process). Held until
	// serve returns, not until the signal: with drain_delay the gateway
	// serves full traffic for a while after it, and the drain's requests
	// are requests too.
	defer gcfloor.Start(context.WithoutCancel(ctx), uint64(cfg.Runtime.GCFloorMB)<<20).Stop()
	g, err := gatehouse.New(cfg, logger)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// newLogger is the gateway's log: JSON lines on w at level and above. A
// duration is written as Go writes it ("2.083s", "150ms"), as the config
// takes durations, not as slog's integer nanoseconds, which carry no unit
// ("took":2083000000).
func newLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				return slog.String(a.Key, a.Value.Duration().String())
			}
			return a
		},
	}))
}

// ignoreHangup keeps SIGHUP, by default fatal, from killing the gateway
// with no drain: service managers send it to reload (ExecReload=kill -HUP),
// and serve does not reload its configuration. Each one is logged, saying
// to restart instead. The returned func stops it.
func ignoreHangup(log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				log.Warn("SIGHUP ignored: configuration reload is not supported; restart gatehouse to apply a changed configuration (SIGTERM drains first)")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// runDemo runs the whole system in one process and prints what to try.
// Its listen addresses take the serve flags' names, so a port another
// program holds (8080 is Traefik's default) can be moved.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := gatehouse.DefaultDemoAddrs()
	fs := flag.NewFlagSet("gatehouse demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&a.HTTP, "http", a.HTTP, "plaintext HTTP listen address, serve mode")
	fs.StringVar(&a.HTTPS, "https", a.HTTPS, "HTTPS listen address (empty: off)")
	fs.StringVar(&a.Management, "management", a.Management, "management listen address: dashboard, healthz, readyz, metrics, control API")
	fs.StringVar(&a.BusListen, "bus-listen", a.BusListen, "embedded NATS client listen address")
	fs.StringVar(&a.DNS, "dns", a.DNS, "DNS listen address, udp+tcp (empty: off; taken: any free port)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gatehouse demo [-http ADDR] [-https ADDR] [-management ADDR] [-bus-listen ADDR] [-dns ADDR]\n\nRuns a gateway, an embedded NATS and two verified hosts of the app \"hello\"\non loopback, and prints the URLs to try. Ctrl-C stops it.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("demo: unexpected argument %q", fs.Arg(0))
	}
	// The hosts enrol through the control API and announce on the bus.
	for _, f := range []struct{ name, addr string }{{"http", a.HTTP}, {"management", a.Management}, {"bus-listen", a.BusListen}} {
		if f.addr == "" {
			return fmt.Errorf("demo: -%s cannot be empty: the demo needs it", f.name)
		}
	}
	// One port for two listeners: the second would fail as if another
	// program held it, named by a config key the demo has no flag for.
	// The port is one whatever its spelling (localhost is 127.0.0.1,
	// every interface takes loopback too), as serve's check has it.
	type flagAddr struct{ name, addr string }
	var seen []flagAddr
	for _, f := range []flagAddr{{"http", a.HTTP}, {"https", a.HTTPS}, {"management", a.Management}, {"bus-listen", a.BusListen}, {"dns", a.DNS}} {
		for _, s := range seen {
			if !config.SamePort(s.addr, f.addr) {
				continue // empty (off), any free port, or for the listener to name
			}
			if s.addr == f.addr {
				return fmt.Errorf("demo: -%s and -%s are both %s: give each its own port", s.name, f.name, f.addr)
			}
			return fmt.Errorf("demo: -%s %s and -%s %s are one port: give each its own port", s.name, s.addr, f.name, f.addr)
		}
		seen = append(seen, f)
	}
	defer gcfloor.Start(ctx, uint64(config.Default().Runtime.GCFloorMB)<<20).Stop()
	return gatehouse.RunDemo(ctx, stdout, gatehouse.DemoOptions{
		Addrs:  &a,
		Logger: newLogger(stderr, slog.LevelWarn),
	})
}
