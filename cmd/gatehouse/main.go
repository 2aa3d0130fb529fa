// Command gatehouse is the single gatehouse binary (DESIGN §11): the
// gateway (serve), a one-process demo, the host sidecar (host), a control
// API client (ctl), an Ed25519 key generator (keygen) and version.
//
// main only parses the subcommand, wires signals and maps the result to an
// exit code; each subcommand is run(ctx, args, stdout, stderr) error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/internal/config"
)

func main() {
	ctx, stop := stopContext()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// stopContext ends at the first SIGINT or SIGTERM, which asks a command
// to stop (serve: drain, after drain_delay). The signals' default then
// returns, so that a second one kills the process at once, whatever the
// command is still waiting for. stop releases the signals.
func stopContext() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// exitCode prints err as one line and returns the process exit code: 0
// for success and for a help request, 2 for a command line that does not
// parse (usageError), 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	code := 1
	if errors.As(err, new(usageError)) || errors.As(err, new(*config.UsageError)) {
		code = 2
	}
	var q quietError
	if !errors.As(err, &q) {
		// Errors from the gateway's packages name themselves already.
		msg := err.Error()
		if !strings.HasPrefix(msg, "gatehouse: ") {
			msg = "gatehouse: " + msg
		}
		fmt.Fprintln(stderr, msg)
	}
	return code
}

// quietError is a failure already reported to the user.
type quietError struct{ error }

// usageError is a command line that does not parse: a missing or unknown
// subcommand, an unknown flag, a required flag left out, a stray
// argument. It exits 2, as Go's flag package and most Unix tools do, so a
// script or a service manager's log tells a wrong invocation from a
// failure of the work asked for (1).
type usageError struct{ error }

// usagef is fmt.Errorf as a usageError.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// subcommand runs one subcommand with the arguments after its name.
type subcommand func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// subcommands lists every subcommand with its one-line help.
var subcommands = []struct {
	name, help string
	run        subcommand
}{
	{"serve", "run the gateway (flags or -config gatehouse.yaml; `serve -h` lists them)", runServe},
	{"demo", "the whole system in one process, with a demo app; prints the URLs to try", runDemo},
	{"host", "the host sidecar: announce a backend, heartbeat, answer challenges (`host -h`)", runHost},
	{"ctl", "a client of the control API (`ctl -h` for usage)", runCtl},
	{"keygen", "write a new Ed25519 key (-out FILE) and print its public key", runKeygen},
	{"version", "print the version", runVersion},
}

// run dispatches args[0] to its subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return usagef("missing subcommand")
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return nil
	case "-version", "--version":
		// As help's spellings: what most tools answer, where an
		// operator's fingers go before they read the subcommand list.
		return runVersion(ctx, args[1:], stdout, stderr)
	}
	for _, s := range subcommands {
		if s.name == name {
			return s.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return usagef("unknown subcommand %q", name)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: gatehouse <subcommand> [flags]\n\nsubcommands:\n")
	for _, s := range subcommands {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.help)
	}
}

// parseFlags parses args with fs, turning its error into one line: for
// -h it prints fs's usage once, to help (stdout: asked for, it is the
// command's output, as serve's is), and for a bad flag it returns the
// message for main to print. fs.Usage must write to fs.Output(): the
// flag package calls it during Parse too, while output is discarded.
//
// A flag given no value takes the next flag as its value ("-key -bus
// URL"): it is refused naming both, as serve's are (config.Load), whether
// or not Parse then failed, rather than go on with the flag's name as a
// value, or say only that the other flag's value is an unexpected
// argument, which repeated a bus URL's password or a token.
func parseFlags(fs *flag.FlagSet, args []string, help io.Writer) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(help)
		fs.Usage()
		fs.SetOutput(out)
		return flag.ErrHelp
	}
	// run prefixes "gatehouse: " already
	name := strings.TrimPrefix(fs.Name(), "gatehouse ")
	if sw, ok := config.SwallowedFlag(fs, args); ok {
		return usagef("%s: %s", name, sw.Hint())
	}
	if err != nil {
		return usagef("%s: %v", name, err)
	}
	return nil
}
