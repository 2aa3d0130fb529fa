package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gatehouse-dev/gatehouse/internal/config"
)

// runServe loads the configuration (file, GATEHOUSE_* variables, flags)
// and runs the gateway until ctx ends.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(args, os.Environ())
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintf(stdout, "usage: gatehouse serve [-config gatehouse.yaml] [flags]\n\nEvery key is a flag and a GATEHOUSE_* variable; flags win over variables,\nvariables over the file. See docs/config.md.\n\n")
		config.Usage(stdout)
		return nil
	}
	if err != nil {
		return err
	}
	_ = cfg
	return errors.New("serve: this build has no gateway assembly yet (internal/gatehouse)")
}

// runDemo runs the one-process demo.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("demo: this build has no gateway assembly yet (internal/gatehouse)")
}

// runHostCommand runs the host sidecar.
func runHostCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("host: this build has no host sidecar yet (cmd/gatehouse/host.go)")
}
