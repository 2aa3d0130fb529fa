//go:build !linux

// The load harness is Linux's: it installs its peers from Debian, reads
// each process's CPU from /proc, ties its children to it with
// Pdeathsig and profiles with perf. Elsewhere it builds to this message,
// so `go build ./...` and `go vet ./...` work on a developer's Mac.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: the load harness runs on Linux only (Debian packages, /proc, perf)")
	os.Exit(2)
}
