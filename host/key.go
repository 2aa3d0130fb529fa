package host

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// GenerateKey returns a new Ed25519 key from crypto/rand.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("host: generate key: %w", err)
	}
	return k, nil
}

// MarshalPrivateKey encodes k as a PKCS#8 PEM block ("PRIVATE KEY"), the
// format `openssl genpkey -algorithm ed25519` writes.
func MarshalPrivateKey(k ed25519.PrivateKey) ([]byte, error) {
	if len(k) != ed25519.PrivateKeySize {
		return nil, errors.New("host: not an ed25519 private key")
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("host: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey decodes the first PEM block of b, which must be a PKCS#8
// "PRIVATE KEY" holding an Ed25519 key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("host: no PEM block in key")
	}
	if blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("host: PEM block is %q, want PKCS#8 \"PRIVATE KEY\"", blk.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("host: parse key: %v", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("host: key is %T, want ed25519", k)
	}
	return ek, nil
}

// LoadKey reads a PKCS#8 PEM Ed25519 private key from path.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("host: read key: %w", err)
	}
	defer f.Close()
	// A PEM key is a few hundred bytes: a path to something else (a log,
	// /dev/zero) is named as such rather than read into memory whole.
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("host: read key: %w", err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("host: read key: %s is larger than %d KiB, which no PEM key is", path, maxKeyFile>>10)
	}
	k, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return k, nil
}

// maxKeyFile bounds what LoadKey reads.
const maxKeyFile = 64 << 10

// WriteKey writes k to path as PKCS#8 PEM, mode 0600, refusing to replace
// an existing file. The file appears whole or not at all: the key is
// written and synced under a temporary name in path's directory, then
// linked to path (which fails if path exists). A crash or a full disk
// mid-write would otherwise leave a short or empty key at path, which
// every later start refuses as a bad key and keygen as a file that exists.
func WriteKey(path string, k ed25519.PrivateKey) error {
	b, err := MarshalPrivateKey(k)
	if err != nil {
		return err
	}
	if err := writeNew(path, b, func(f *os.File, b []byte) error { _, err := f.Write(b); return err }); err != nil {
		return fmt.Errorf("host: write key: %w", err)
	}
	return nil
}

// writeNew makes path with content b, whole or not at all, and never
// over an existing file; write writes to the temporary file (tests make
// it fail).
func writeNew(path string, b []byte, write func(*os.File, []byte) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if _, err := os.Lstat(path); err == nil {
		return &os.PathError{Op: "open", Path: path, Err: fs.ErrExist}
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the link, path keeps the file
	if err := fill(f, b, write); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) && errors.Is(le.Err, fs.ErrExist) {
			return &os.PathError{Op: "open", Path: path, Err: fs.ErrExist}
		}
		// A file system without hard links: made in place, and taken
		// away again if the write fails.
		return writeInPlace(path, b, write)
	}
	// The new name is durable once the directory is synced; a failure
	// here leaves a whole file, so it is not an error.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// writeInPlace is writeNew where no hard link can be made: path is
// created (never over an existing file) and written, and removed if the
// write fails.
func writeInPlace(path string, b []byte, write func(*os.File, []byte) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := fill(f, b, write); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// fill writes b to f with write, syncs and closes f.
func fill(f *os.File, b []byte, write func(*os.File, []byte) error) error {
	err := write(f, b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// PublicKeyString is the wire and enrolment form of a public key: std
// base64 of its raw 32 bytes.
func PublicKeyString(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// publicKeyChars is the length of a public key in its wire and
// enrolment form ([PublicKeyString]).
const publicKeyChars = 44

// ParsePublicKey reverses [PublicKeyString], and accepts nothing else:
// exactly the 44 characters it writes. Go's decoder skips line breaks,
// so without that one key could be written many ways, and discovery
// compares announced keys as written: each spelling would count as new
// claims, checked at once however often it was sent.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	if len(s) != publicKeyChars {
		return nil, fmt.Errorf("public_key must be the %d characters of std base64 of 32 bytes, got %d", publicKeyChars, len(s))
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize || base64.StdEncoding.EncodeToString(b) != s {
		return nil, errors.New("public_key must be std base64 of 32 bytes, with no line breaks")
	}
	return ed25519.PublicKey(b), nil
}
