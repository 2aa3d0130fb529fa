package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"

	"github.com/gatehouse-dev/gatehouse/host"
)

// runKeygen writes a new Ed25519 private key as PKCS#8 PEM (what
// `openssl genpkey -algorithm ed25519` writes; mode 0600; an existing file
// is never replaced) and prints the public key as the std base64 of its
// raw 32 bytes, the form host-key enrolment and cluster lists take.
func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gatehouse keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "file to write the private key to (required; never overwritten)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gatehouse keygen -out FILE\n\nWrites a PKCS#8 PEM Ed25519 private key to FILE (mode 0600) and prints\nthe public key (std base64 of the raw 32 bytes) for enrolment.\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		if *out == "" { // "gatehouse keygen host.key"
			return usagef("keygen: unexpected argument %q: the key's file is given with -out FILE", fs.Arg(0))
		}
		return usagef("keygen: unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return usagef("keygen: -out FILE is required")
	}
	k, err := host.GenerateKey()
	if err != nil {
		return fmt.Errorf("keygen: %v", err)
	}
	if err := host.WriteKey(*out, k); err != nil {
		if errors.Is(err, iofs.ErrExist) {
			// Say why and what to do: the old key may be a host's
			// enrolled identity, which a new one would orphan.
			return fmt.Errorf("keygen: %s already exists, and keygen never replaces a key (a host enrolled with it would stop verifying): choose another -out, or remove the file first", *out)
		}
		// The path in the error is the temporary file the key is first
		// written to, beside -out, which the operator never named: give
		// theirs, with the system's reason (a directory missing or not
		// writable).
		if pe := (*iofs.PathError)(nil); errors.As(err, &pe) {
			return fmt.Errorf("keygen: -out %s: %v", *out, pe.Err)
		}
		return fmt.Errorf("keygen: %v", err)
	}
	_, err = fmt.Fprintln(stdout, host.PublicKeyString(k.Public().(ed25519.PublicKey)))
	return err
}
