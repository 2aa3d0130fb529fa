package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCmd runs the binary's run with args and returns stdout, stderr and
// the error main would print.
func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host.key")
	out, _, err := runCmd(t, "keygen", "-out", path)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("printed public key %q: %v (%d bytes)", out, err, len(pub))
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("not a PKCS#8 PEM file: %q", b)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok || !bytes.Equal(ek.Public().(ed25519.PublicKey), pub) {
		t.Fatalf("key %T does not match the printed public key", k)
	}
	// never overwritten, and the refusal says what to do instead
	if _, _, err := runCmd(t, "keygen", "-out", path); err == nil || !strings.Contains(err.Error(), path+" already exists") ||
		!strings.Contains(err.Error(), "choose another -out") || strings.Contains(err.Error(), "host:") {
		t.Errorf("second keygen to the same file: %v, want it to name the file as existing and say to choose another -out", err)
	}
	if b2, _ := os.ReadFile(path); !bytes.Equal(b, b2) {
		t.Error("key file changed")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Log("openssl not installed; skipping the openssl check")
		return
	}
	if o, err := exec.Command("openssl", "pkey", "-in", path, "-noout").CombinedOutput(); err != nil {
		t.Fatalf("openssl pkey: %v: %s", err, o)
	}
	der, err := exec.Command("openssl", "pkey", "-in", path, "-pubout", "-outform", "DER").Output()
	if err != nil {
		t.Fatalf("openssl pkey -pubout: %v", err)
	}
	if !bytes.HasSuffix(der, pub) {
		t.Errorf("openssl's public key %x does not end in the printed key %x", der, pub)
	}
}

// TestBadInvocations: each bad command line fails with one clear line.

// A key that cannot be written is named as -out gave it, with the
// system's reason. The line named the hidden temporary file the key is
// first written to (".host.key.123.tmp"), which the operator never
// typed, under the host package's "host: write key:".
func TestKeygenNamesOutWhereItCannotWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ out, want string }{
		{filepath.Join(dir, "missing", "host.key"), "keygen: -out " + filepath.Join(dir, "missing", "host.key") + ": no such file or directory"},
		{filepath.Join(file, "host.key"), "keygen: -out " + filepath.Join(file, "host.key") + ": not a directory"},
	} {
		out, _, err := runCmd(t, "keygen", "-out", tc.out)
		if err == nil || err.Error() != tc.want || exitCode(err, io.Discard) != 1 {
			t.Errorf("keygen -out %s: %v\nwant %s, exit 1", tc.out, err, tc.want)
		}
		if out != "" {
			t.Errorf("keygen -out %s printed %q", tc.out, out)
		}
	}
}
func TestBadInvocations(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
		code int // 2: the command line does not parse; 1: it does, and the work failed
	}{
		{nil, "missing subcommand", 2},
		{[]string{"frobnicate"}, `unknown subcommand "frobnicate"`, 2},
		{[]string{"keygen"}, "keygen: -out FILE is required", 2},
		{[]string{"keygen", "host.key"}, `keygen: unexpected argument "host.key": the key's file is given with -out FILE`, 2},
		{[]string{"keygen", "-out", "x.key", "extra"}, `keygen: unexpected argument "extra"`, 2},
		{[]string{"keygen", "-bits", "4096"}, "flag provided but not defined: -bits", 2},
		{[]string{"keygen", "-out", filepath.Join(dir, "no/such/dir/k")}, "keygen: -out " + filepath.Join(dir, "no/such/dir/k") + ": no such file or directory", 1},
		{[]string{"version", "extra"}, `version: unexpected argument "extra"`, 2},
		{[]string{"serve", "-http-mode", "x"}, `config: http.mode (-http-mode): must be one of redirect, acme-only, serve, got "x"`, 1},
		{[]string{"serve", "-nosuch"}, "config: flag provided but not defined: -nosuch", 2},
		{[]string{"serve", "-drain-timeout", "soon"}, `config: drain_timeout (-drain-timeout): want a duration like 30s, got "soon"`, 1},
		{[]string{"serve", "stray"}, `config: unexpected argument "stray"`, 2},
		{[]string{"demo", "-nosuch"}, "demo: flag provided but not defined: -nosuch", 2},
		{[]string{"demo", "stray"}, `demo: unexpected argument "stray"`, 2},
		{[]string{"host", "-nosuch"}, "host: flag provided but not defined: -nosuch", 2},
		{[]string{"host", "stray"}, `host: unexpected argument "stray"`, 2},
		{[]string{"host"}, "is required", 2},
		{[]string{"version", "-nosuch"}, "version: flag provided but not defined: -nosuch", 2},
		{[]string{"ctl", "-nosuch", "apps", "list"}, "ctl: flag provided but not defined: -nosuch", 2},
		{[]string{"ctl"}, "ctl: want RESOURCE VERB", 2},
		{[]string{"ctl", "widgets", "list"}, `ctl: unknown resource "widgets"`, 2},
		{[]string{"ctl", "apps", "frob"}, `ctl: apps takes list, get, put, delete, not "frob"`, 2},
		{[]string{"ctl", "apps", "get"}, "ctl: apps get needs 1 name(s)", 2},
		{[]string{"ctl", "apps", "put", "shop", "{not json"}, "ctl: the body is not valid JSON: invalid character 'n' looking for beginning of object key string (at byte 2)", 1},
		{[]string{"ctl", "apps", "list", "extra"}, `ctl: unexpected argument "extra"`, 2},
		// words and flags that this verb takes none of: the shape of the
		// command line is wrong whatever their values
		{[]string{"ctl", "apps", "put", "shop", "{}", "-f", "shop.json"}, "ctl: give the body as -f FILE or as an argument, not both", 2},
		{[]string{"ctl", "-f", "shop.json", "apps", "get", "shop"}, "ctl: -f is only for put and verify", 2},
		{[]string{"ctl", "-limit", "2", "apps", "get", "shop"}, "ctl: -limit and -after are for list", 2},
		{[]string{"ctl", "-after", "x", "clusters", "list"}, "ctl: -limit and -after are for list", 2},
		{[]string{"ctl", "-if-match", "abc", "apps", "list"}, "ctl: -if-match and -if-none-match are for", 2},
		{[]string{"ctl", "-limit", "1001", "apps", "list"}, "ctl: -limit must be 1 to 1000, got 1001", 1},
		{[]string{"ctl", "-api", "ftp://x", "apps", "list"}, `ctl: -api must be an http(s) URL, got "ftp://x"`, 1},
		{[]string{"ctl", "-api", "http://127.0.0.1:1/?x=1", "apps", "list"}, `ctl: -api must be a base URL without a query or fragment, like http://127.0.0.1:9180, got "http://127.0.0.1:1/?x=1"`, 1},
		{[]string{"ctl", "-api", "http://127.0.0.1:1?", "apps", "list"}, "ctl: -api must be a base URL without a query or fragment", 1},
		{[]string{"ctl", "-api", "http://127.0.0.1:1/#top", "apps", "list"}, "ctl: -api must be a base URL without a query or fragment", 1},
		{[]string{"ctl", "-api", "http://127.0.0.1:1", "apps", "list"}, "ctl: Get ", 1},
		// A timeout of 0 ran out before the request was sent: "context
		// deadline exceeded", which reads as a gateway that did not answer.
		{[]string{"ctl", "-timeout", "0", "-api", "http://127.0.0.1:1", "apps", "list"}, "ctl: -timeout must be positive, got 0s", 1},
		{[]string{"ctl", "-timeout", "-5s", "-api", "http://127.0.0.1:1", "apps", "list"}, "ctl: -timeout must be positive, got -5s", 1},
		// a flag missing its value, last on the line: every subcommand
		// names it, exit 2, before anything starts
		{[]string{"serve", "-http"}, "config: flag needs an argument: -http", 2},
		{[]string{"demo", "-http"}, "demo: flag needs an argument: -http", 2},
		{[]string{"host", "-id"}, "host: flag needs an argument: -id", 2},
		{[]string{"ctl", "apps", "list", "-limit"}, "ctl: flag needs an argument: -limit", 2},
		{[]string{"keygen", "-out"}, "keygen: flag needs an argument: -out", 2},
	}
	for _, c := range cases {
		_, _, err := runCmd(t, c.args...)
		if err == nil {
			t.Errorf("%q: succeeded, want %q", c.args, c.want)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%q: error %q, want one line containing %q", c.args, msg, c.want)
		}
		if got := exitCode(err, &bytes.Buffer{}); got != c.code {
			t.Errorf("%q: exit code %d, want %d", c.args, got, c.code)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"serve", "-h"}, {"ctl", "-h"}, {"keygen", "-h"}, {"host", "-h"}, {"demo", "-h"}, {"version", "-h"}, {"version", "--help"}} {
		out, errOut, err := runCmd(t, args...)
		if exitCode(err, &bytes.Buffer{}) != 0 || out+errOut == "" {
			t.Errorf("%q: err %v, no help printed", args, err)
		}
	}
	out, _, err := runCmd(t, "serve", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "-http-mode") || !strings.Contains(out, "GATEHOUSE_HTTP_MODE") {
		t.Errorf("serve -h: %v\n%s", err, out)
	}
	if !strings.Contains(out, "management listen address: dashboard,") {
		t.Errorf("serve -h does not say -management serves the dashboard:\n%s", out)
	}
	// Help asked for is the command's output: on stdout, once, exit 0.
	// keygen printed its description twice, and keygen and ctl wrote
	// their help to stderr.
	for _, sub := range []string{"serve", "demo", "ctl", "keygen", "host", "version"} {
		out, errOut, err := runCmd(t, sub, "-h")
		if exitCode(err, &bytes.Buffer{}) != 0 || errOut != "" {
			t.Errorf("%s -h: exit %d, stderr %q", sub, exitCode(err, &bytes.Buffer{}), errOut)
		}
		if n := strings.Count(out, "usage: gatehouse "+sub); n != 1 {
			t.Errorf("%s -h: the usage line is on stdout %d times:\n%s", sub, n, out)
		}
	}
	for _, spelling := range []string{"version", "-version", "--version"} {
		out, _, err = runCmd(t, spelling)
		if err != nil || !strings.HasPrefix(out, "gatehouse ") {
			t.Errorf("%s: %q %v", spelling, out, err)
		}
	}
}

// An error prints as one line with one "gatehouse: " before it, whether
// or not the package that made it named itself.
func TestExitCodePrefixOnce(t *testing.T) {
	for _, err := range []error{errors.New("bad flag"), errors.New("gatehouse: cluster key: denied")} {
		var out bytes.Buffer
		exitCode(err, &out)
		if got := out.String(); strings.Count(got, "gatehouse: ") != 1 || !strings.HasSuffix(got, strings.TrimPrefix(err.Error(), "gatehouse: ")+"\n") {
			t.Errorf("%v printed %q", err, got)
		}
	}
}

// TestSwallowedFlagNamed: a flag given no value takes the next flag as
// its value, as Go's flags do. serve named it; host, demo, ctl and keygen
// said only "unexpected argument" with the value left over, which for
// host was the bus URL with its password, or took the flag's name as the
// value and went on: ctl sent "-api" as its token, and said the resource
// was unknown. Each names the flag now, exit 2, with nothing started or
// sent and no secret repeated.
func TestSwallowedFlagNamed(t *testing.T) {
	hostArgs := func(args ...string) []string {
		return append([]string{"host", "-cluster", "c1", "-id", "web-1", "-app", "hello",
			"-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1"}, args...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{hostArgs("-key", "-bus", "nats://gw:s3cret@127.0.0.1:4222"), `host: -key took "-bus" as its value: give it one, as -key VALUE`},
		{hostArgs("-key", "k", "-app", "--addr=127.0.0.1:0", "x"), `host: -app took "--addr=…" as its value: give it one, as -app VALUE`},
		{[]string{"demo", "-http", "-dns", "127.0.0.1:0"}, `demo: -http took "-dns" as its value: give it one, as -http VALUE`},
		{[]string{"demo", "-management", "-bus-listen=127.0.0.1:0", "x"}, `demo: -management took "-bus-listen=…" as its value: give it one, as -management VALUE`},
		{[]string{"ctl", "-api", "-token", "s3cret-0123456789", "apps", "list"}, `ctl: -api took "-token" as its value: give it one, as -api VALUE`},
		{[]string{"ctl", "-token", "-api", "http://127.0.0.1:1", "apps", "list"}, `ctl: -token took "-api" as its value: give it one, as -token VALUE`},
		{[]string{"ctl", "-timeout", "-api", "http://127.0.0.1:1", "apps", "list"}, `ctl: -timeout took "-api" as its value: give it one, as -timeout VALUE`},
		// after the positional words too
		{[]string{"ctl", "-api", "http://127.0.0.1:1", "apps", "list", "-after", "-limit", "5"}, `ctl: -after took "-limit" as its value: give it one, as -after VALUE`},
		{[]string{"keygen", "-out", "-out", "k"}, `keygen: -out took "-out" as its value: give it one, as -out VALUE`},
		// -h taken as a value: keygen wrote its key to a file named "-h"
		{[]string{"keygen", "-out", "-h"}, `keygen: -out took "-h" as its value: give it one, as -out VALUE`},
	} {
		t.Run(strings.Join(c.args[:2], " "), func(t *testing.T) {
			t.Chdir(t.TempDir()) // keygen's -out, if taken as given
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			err := run(ctx, c.args, &out, &errb)
			if err == nil || err.Error() != c.want || exitCode(err, io.Discard) != 2 {
				t.Errorf("%q: %v\nwant %s, exit 2", c.args, err, c.want)
			}
			if out.Len()+errb.Len() != 0 {
				t.Errorf("%q printed %q and %q", c.args, out.String(), errb.String())
			}
			if ents, _ := os.ReadDir("."); len(ents) != 0 {
				t.Errorf("%q wrote %s", c.args, ents[0].Name())
			}
		})
	}
}

// TestStrayArgumentNoSecret: an argument left over is quoted in the
// error line, which ends up in logs. A bus list written with a space
// after its comma, or -bus= with the URL after a space, left a bus URL
// over, and host and serve repeated its password; serve repeated a
// token given as -control-token= TOKEN. Exit 2, nothing started.
func TestStrayArgumentNoSecret(t *testing.T) {
	hostArgs := func(args ...string) []string {
		return append([]string{"host", "-cluster", "c1", "-id", "web-1", "-app", "hello", "-key", "k",
			"-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1"}, args...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{hostArgs("-bus", "nats://gw:s3cret@127.0.0.1:1,", "nats://gw:s3cret@127.0.0.1:2"), `host: unexpected argument "nats://xxxxx@127.0.0.1:2"`},
		{hostArgs("-bus=", "nats://gw:s3cret@127.0.0.1:1"), `host: unexpected argument "nats://xxxxx@127.0.0.1:1"`},
		{[]string{"serve", "-bus", "nats://gw:s3cret@127.0.0.1:1,", "nats://gw:s3cret@127.0.0.1:2"}, `config: unexpected argument "nats://xxxxx@127.0.0.1:2" (flags come as -name value)`},
		{[]string{"serve", "-control-token=", "s3cret-0123456789"}, `config: unexpected argument (the value of -control-token, not shown) (flags come as -name value)`},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), c.args, &out, &errb)
			if err == nil || err.Error() != c.want || exitCode(err, io.Discard) != 2 {
				t.Errorf("%q: %v\nwant %s, exit 2", c.args, err, c.want)
			}
			if out.Len()+errb.Len() != 0 {
				t.Errorf("%q printed %q and %q", c.args, out.String(), errb.String())
			}
		})
	}
}
