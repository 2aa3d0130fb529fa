package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

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
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.Log.SlogLevel()}))
	// GOGC is the process's: the floor belongs to the process, not to
	// the gateway (tests run many gateways in one process).
	defer gcfloor.Start(ctx, uint64(cfg.Runtime.GCFloorMB)<<20).Stop()
	g, err := gatehouse.New(cfg, logger)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// runDemo runs the whole system in one process and prints what to try.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprintf(stdout, "usage: gatehouse demo\n\nRuns a gateway, an embedded NATS and two verified hosts of the app \"hello\"\non loopback, and prints the URLs to try. Ctrl-C stops it.\n")
			return flag.ErrHelp
		}
		return fmt.Errorf("demo: unexpected argument %q", args[0])
	}
	defer gcfloor.Start(ctx, uint64(config.Default().Runtime.GCFloorMB)<<20).Stop()
	return gatehouse.RunDemo(ctx, stdout, gatehouse.DemoOptions{
		Logger: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
}
