package bus

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// The embedded server has two users (DESIGN §3, §7). Hosts connect without
// credentials, as `gatehouse host` does, and are mapped to hostUser, which
// may do what the host protocol needs and nothing else: in particular it
// cannot reach JetStream ($JS.>, $KV.>), so it cannot write the host-key or
// routing buckets behind the control API's back, nor forge the store's
// republished changes or cluster announcements. Gateways authenticate as
// GatewayUser with the secret kept in TokenFile, and have full rights.
const (
	// GatewayUser is the user a gateway authenticates as on an embedded
	// bus: nats://gatehouse:SECRET@host:port.
	GatewayUser = "gatehouse"
	// TokenFile is the file, in the data directory, that holds the
	// embedded bus's gateway secret. It is generated on first start with
	// mode 0600 and reused afterwards.
	TokenFile = "bus.token"

	hostUser = "host" // what a client without credentials becomes

	// InboxPrefix replaces nats.go's "_INBOX" on every gateway connection,
	// so the JetStream replies and watch deliveries a gateway receives
	// (routing state, host keys, certificates) never match the "_INBOX.>"
	// that hosts may subscribe to.
	InboxPrefix = "_GATEHOUSE_INBOX"
)

// hostPublish is every subject a host publishes (host.AnnounceSubject,
// HeartbeatSubject and LeaveSubject for any cluster). A host subscribes
// only to its own inbox, where a gateway that does not know it answers a
// heartbeat to ask it to announce again (host package doc).
var hostPublish = []string{
	"gatehouse.*.hosts.announce",
	"gatehouse.*.hosts.heartbeat",
	"gatehouse.*.hosts.leave",
}

var hostSubscribe = []string{"_INBOX.>"}

// MaxSubscriptions bounds the subscriptions of one client of the embedded
// server. A host needs one (its inbox) and a gateway a few per bucket and
// peer cluster; without a bound, one unauthenticated connection could
// subscribe until the gateway's memory runs out (NATS sets none by
// default). The server refuses each one past it with "maximum
// subscriptions exceeded"; the connection and its other subscriptions
// stay.
const MaxSubscriptions = 1024

// users returns the embedded server's users: the gateway's, with full
// rights, and the restricted one that clients without credentials get.
func users(secret string) []*server.User {
	return []*server.User{
		{Username: GatewayUser, Password: secret},
		{Username: hostUser, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: hostPublish},
			Subscribe: &server.SubjectPermission{Allow: hostSubscribe},
		}},
	}
}

// minSecretLen is the shortest secret accepted from TokenFile.
const minSecretLen = 16

// loadOrCreateSecret returns the secret in dir/TokenFile, generating it
// first if the file does not exist. It never returns the secret inside an
// error.
func loadOrCreateSecret(dir string) (secret string, created bool, err error) {
	path := filepath.Join(dir, TokenFile)
	secret, err = readSecret(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return secret, false, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("bus: generate %s: %w", path, err)
	}
	secret = hex.EncodeToString(b[:])
	if err := writeSecret(dir, path, secret); err != nil {
		return "", false, err
	}
	return secret, true, nil
}

func readSecret(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("bus: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return "", fmt.Errorf("bus: %s has mode %04o; it holds the bus credential: chmod 600 it", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("bus: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < minSecretLen || strings.IndexFunc(s, notUnreserved) >= 0 {
		return "", fmt.Errorf("bus: %s must hold one secret of at least %d letters, digits or -._~", path, minSecretLen)
	}
	return s, nil
}

// notUnreserved reports whether r may not appear unescaped in a URL's
// user info (RFC 3986 unreserved), so a secret can be pasted into bus.url.
func notUnreserved(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("-._~", r)
}

// writeSecret writes secret to path with mode 0600, through a temporary
// file so a crash never leaves a half-written one.
func writeSecret(dir, path, secret string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	f, err := os.CreateTemp(dir, TokenFile+".tmp-*") // mode 0600
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	_, err = f.WriteString(secret + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("bus: write %s: %w", path, err)
	}
	return nil
}

// redact hides the user info of a bus URL (a password, or a token given
// as the user name) so the URL can be logged or put in an error.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && u.Opaque == "" {
		return redactURL(u).String()
	}
	// Unparsable, or without "//", where user:password@host parses as
	// scheme:opaque and u.User is nil: hide all before the last '@'.
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			return scheme + "://xxxxx@" + rest[i+1:]
		}
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "xxxxx@" + raw[i+1:]
	}
	return raw
}

func redactURL(u *url.URL) *url.URL {
	if u.User == nil {
		return u
	}
	c := *u
	if _, hasPass := u.User.Password(); hasPass {
		c.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		c.User = url.User("xxxxx")
	}
	return &c
}

// stripUser removes the user info of a bus URL: what a host, which
// connects without credentials, is told to dial.
func stripUser(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	c := *u
	c.User = nil
	return c.String()
}
