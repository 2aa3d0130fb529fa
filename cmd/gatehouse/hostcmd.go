package main

import (
	"context"
	"errors"
	"io"
)

// runHostCommand stands in for runHost (host.go, the sidecar) until that
// file is in the tree.
func runHostCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("host: this build has no host sidecar yet (cmd/gatehouse/host.go)")
}
