package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// runVersion prints the module version, the VCS revision it was built
// from (when known) and the Go version.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	// A flag set, though version takes no flags, so that -h is help (exit
	// 0), as for every other subcommand, not an unexpected argument.
	fs := flag.NewFlagSet("gatehouse version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gatehouse version\n\nPrints the version, the VCS revision it was built from, the Go version and the platform.\n")
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version: unexpected argument %q", fs.Arg(0))
	}
	_, err := fmt.Fprintln(stdout, versionString())
	return err
}

func versionString() string {
	v, rev, dirty := "(devel)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return fmt.Sprintf("gatehouse %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
