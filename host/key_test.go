package host

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/openssl-ed25519.pem was written by
// `openssl genpkey -algorithm ed25519`; its public key, from
// `openssl pkey -pubout -outform DER | tail -c 32 | base64`:
const opensslPub = "m58WZXNkinN/lEE9ORrlAF8bemkOpTDW1FcTXswqorI="

func TestLoadOpenSSLKey(t *testing.T) {
	k, err := LoadKey("testdata/openssl-ed25519.pem")
	if err != nil {
		t.Fatal(err)
	}
	if got := PublicKeyString(k.Public().(ed25519.PublicKey)); got != opensslPub {
		t.Fatalf("public key %s, want %s", got, opensslPub)
	}
}

func TestWriteKeyRoundTrip(t *testing.T) {
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "host.pem")
	if err := WriteKey(path, k); err != nil {
		t.Fatal(err)
	}
	if err := WriteKey(path, k); err == nil {
		t.Fatal("WriteKey replaced an existing file")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	back, err := LoadKey(path)
	if err != nil || !back.Equal(k) {
		t.Fatalf("round trip: %v", err)
	}
	// openssl must read what we write, and derive the same public key.
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl to cross-check with")
	}
	out, err := exec.Command("openssl", "pkey", "-in", path, "-pubout", "-outform", "DER").Output()
	if err != nil {
		t.Fatalf("openssl pkey: %v", err)
	}
	if !bytes.HasSuffix(out, k.Public().(ed25519.PublicKey)) {
		t.Fatal("openssl derived another public key")
	}
}

func TestParseKeyErrors(t *testing.T) {
	rsaLike := "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
	for name, in := range map[string]string{
		"empty":    "",
		"not pem":  "hello",
		"rsa type": rsaLike,
		"garbage":  "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
	} {
		if _, err := ParsePrivateKey([]byte(in)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := LoadKey(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file loaded")
	}
}

func TestParsePublicKey(t *testing.T) {
	for in, ok := range map[string]bool{
		opensslPub: true,
		"":         false,
		"m58WZXNkinN/lEE9ORrlAF8bemkOpTDW1FcTXswqorI":  false, // unpadded
		"m58WZXNkinN_lEE9ORrlAF8bemkOpTDW1FcTXswqorI=": false, // url alphabet
		"AAAA": false,
		// Go's decoder skips line breaks: one key, many spellings.
		opensslPub[:20] + "\n" + opensslPub[20:]:   false,
		opensslPub[:20] + "\r\n" + opensslPub[20:]: false,
		opensslPub[:43] + "\n=":                    false,
		"\n" + opensslPub:                          false,
		opensslPub + "\n":                          false,
		opensslPub[:42] + "J=":                     false, // non-zero padding bits
	} {
		if _, err := ParsePublicKey(in); (err == nil) != ok {
			t.Errorf("ParsePublicKey(%q) err = %v", in, err)
		}
	}
}

// TestWriteKeyWholeOrNothing: a write that fails half way (a full disk)
// leaves no file at the path, nor a temporary one beside it, so the next
// keygen or start is not refused by a short key or a file that exists.
func TestWriteKeyWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.key")
	half := func(f *os.File, b []byte) error {
		if _, err := f.Write(b[:len(b)/2]); err != nil {
			return err
		}
		return errors.New("no space left on device")
	}
	if err := writeNew(path, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), half); err == nil {
		t.Fatal("writeNew succeeded with a failing write")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	// An existing file is refused as before, and nothing is left beside it.
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, _ := GenerateKey()
	if err := WriteKey(path, k); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteKey over a file: %v, want ErrExist", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("dir holds %v, want the one file", ents)
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Fatalf("existing file changed: %q", b)
	}
}

// TestLoadKeyBounded: a key path naming something else than a key (a
// log, /dev/zero) is refused after 64 KiB, not read into memory whole.
func TestLoadKeyBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(big, bytes.Repeat([]byte("A"), 100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		_, err := LoadKey(path)
		if err == nil || !strings.Contains(err.Error(), "larger than 64 KiB") {
			t.Errorf("LoadKey(%s) = %v, want a refusal of its size", path, err)
		}
	}
}
