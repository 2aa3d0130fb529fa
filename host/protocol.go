package host

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ChallengePath is the path a gateway POSTs a [ChallengeRequest] to.
const ChallengePath = "/.well-known/gatehouse/challenge"

// ChallengeALPN is the protocol a gateway's challenge offers in its TLS
// ClientHello, after http/1.1 (which a host's server picks). A gateway
// never relays a challenge: it does not pipe a ClientHello offering it
// to a passthrough host, and answers 508 to a request for
// [ChallengePath] on its HTTP listeners. A host whose announced addr
// reaches a gateway, not the host, so fails its challenge: verified, it
// would have made the gateway dial itself (or another gateway that
// routes back) in a loop.
const ChallengeALPN = "gatehouse-challenge"

// ChallengePrefix starts every signed challenge message; the version lets
// the message change without one signature ever meaning two things.
const ChallengePrefix = "gatehouse-challenge-v1"

// LeavePrefix starts every signed leave message, distinct from
// [ChallengePrefix] so that no challenge answer can pass for a leave.
const LeavePrefix = "gatehouse-leave-v1"

// MaxMessageSize bounds a bus message body; a longer one is rejected
// unread.
const MaxMessageSize = 64 << 10

// MaxChallengeSize bounds a challenge request or response body.
const MaxChallengeSize = 4 << 10

// Nonce bounds, in decoded bytes. Gateways send [NonceSize].
const (
	NonceSize    = 32
	minNonceSize = 16
	maxNonceSize = 64
)

// Schemes a host may announce (DESIGN §4).
const (
	SchemeHTTP  = "http"  // plain HTTP/1.1
	SchemeH2C   = "h2c"   // HTTP/2 cleartext (gRPC)
	SchemeHTTPS = "https" // the gateway proxies over TLS to the host
	SchemeTLS   = "tls"   // passthrough: the host terminates TLS for its names
)

// Subject kinds, the last token of a hosts subject.
const (
	KindAnnounce  = "announce"
	KindHeartbeat = "heartbeat"
	KindLeave     = "leave"
)

// AnnounceSubject is gatehouse.{cluster}.hosts.announce.
func AnnounceSubject(cluster string) string { return subject(cluster, KindAnnounce) }

// HeartbeatSubject is gatehouse.{cluster}.hosts.heartbeat.
func HeartbeatSubject(cluster string) string { return subject(cluster, KindHeartbeat) }

// LeaveSubject is gatehouse.{cluster}.hosts.leave.
func LeaveSubject(cluster string) string { return subject(cluster, KindLeave) }

// WildcardSubject is gatehouse.{cluster}.hosts.*: all three, in the order
// each publisher sent them.
func WildcardSubject(cluster string) string { return subject(cluster, "*") }

func subject(cluster, kind string) string { return "gatehouse." + cluster + ".hosts." + kind }

// Announce says a host is online: sent on start and on every reconnect.
type Announce struct {
	HostID    string   `json:"host_id"`
	Apps      []string `json:"apps"`
	Addr      string   `json:"addr"`
	Scheme    string   `json:"scheme"`
	PublicKey string   `json:"public_key"` // std base64 of the raw 32-byte key
	TS        int64    `json:"ts"`         // unix seconds
}

// Heartbeat says a host is still alive.
type Heartbeat struct {
	HostID   string `json:"host_id"`
	TS       int64  `json:"ts"`
	Inflight int64  `json:"inflight"`
}

// Leave says a host is going away: drain it. Gateways act on it only when
// Sig verifies under the host's key: without it anyone who may publish on
// the bus could take any host out of rotation.
type Leave struct {
	HostID string `json:"host_id"`
	TS     int64  `json:"ts"`            // unix seconds
	Sig    string `json:"sig,omitempty"` // std base64 of the Ed25519 signature over [LeaveMessage]
}

// ChallengeRequest is the body a gateway POSTs to [ChallengePath].
type ChallengeRequest struct {
	Nonce   string `json:"nonce"` // std base64 (padded) of NonceSize random bytes
	Gateway string `json:"gateway"`
	HostID  string `json:"host_id"`
	TS      int64  `json:"ts"`
}

// ChallengeResponse is the host's answer.
type ChallengeResponse struct {
	Signature string `json:"signature"` // std base64 of the 64-byte Ed25519 signature
}

// ChallengeMessage is the exact byte string a host signs:
//
//	"gatehouse-challenge-v1\n" + hostID + "\n" + addr + "\n" + nonce + "\n" + gateway
//
// nonce is the base64 text of the request's nonce field as sent.
func ChallengeMessage(hostID, addr, nonce, gateway string) []byte {
	return []byte(ChallengePrefix + "\n" + hostID + "\n" + addr + "\n" + nonce + "\n" + gateway)
}

// LeaveMessage is the exact byte string a host signs to leave:
//
//	"gatehouse-leave-v1\n" + hostID + "\n" + decimal ts
//
// A host id cannot hold a newline, so each message has one reading.
func LeaveMessage(hostID string, ts int64) []byte {
	return []byte(LeavePrefix + "\n" + hostID + "\n" + strconv.FormatInt(ts, 10))
}

var (
	hostIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	labelRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// ValidHostID reports whether s may be a host id: 1 to 128 of
// [A-Za-z0-9._-], starting with a letter or digit.
func ValidHostID(s string) bool { return hostIDRE.MatchString(s) }

// ValidCluster reports whether s may be a cluster id (a DNS label).
func ValidCluster(s string) bool { return labelRE.MatchString(s) }

// ValidApp reports whether s may be an app id (a DNS label).
func ValidApp(s string) bool { return labelRE.MatchString(s) }

// ValidScheme reports whether s is one of the four announceable schemes.
func ValidScheme(s string) bool {
	switch s {
	case SchemeHTTP, SchemeH2C, SchemeHTTPS, SchemeTLS:
		return true
	}
	return false
}

// maxApps bounds an announce's app list.
const maxApps = 256

// CheckAddr reports why addr cannot be announced: it must be host:port
// with a numeric port in 1..65535 and a host that names one machine (not
// empty, not 0.0.0.0 or ::).
func CheckAddr(addr string) error {
	if len(addr) > 300 {
		return errors.New("addr too long")
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("addr %q: %v", addr, err)
	}
	// Digits only, as a URL's port (url.Parse refuses the rest): Atoi
	// also takes a sign, and "+80" would announce an address no gateway
	// can send a challenge to.
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || p[0] < '1' || p[0] > '9' {
		return fmt.Errorf("addr %q: port must be 1-65535", addr)
	}
	if h == "" {
		return fmt.Errorf("addr %q: no host", addr)
	}
	if strings.HasPrefix(addr, "[") && !strings.Contains(h, ":") {
		// SplitHostPort takes any host in brackets; a URL only an IPv6
		// address, so no challenge could be sent to "[10.0.0.5]:80".
		return fmt.Errorf("addr %q: only an IPv6 address goes in brackets", addr)
	}
	if ip := net.ParseIP(h); ip != nil {
		if ip.IsUnspecified() {
			return fmt.Errorf("addr %q: unspecified address cannot be reached", addr)
		}
		return nil
	}
	if strings.ContainsAny(h, "\n\r/ @?#%") || !validHostname(h) {
		return fmt.Errorf("addr %q: bad host name", addr)
	}
	return nil
}

func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.ToLower(h), ".") {
		if l == "" || len(l) > 63 || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return false
		}
	}
	return true
}

// maxQuoted bounds how much of a field a validation error quotes. The
// field is whatever the message's sender wrote, as long as the message
// may be (MaxMessageSize), and gateways log the error of every message
// they drop: quoted whole (%q takes four bytes for one it escapes), one
// message made a line of up to 256 KiB. Over a host id's 128 bytes, so
// that a host id of a valid length is quoted whole.
const maxQuoted = 160

// quoted is s quoted as %q does, its first maxQuoted bytes at most (cut
// at a character's start) and then its length.
func quoted(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	n := maxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// Validate reports the first thing wrong with a, naming the field.
func (a *Announce) Validate() error {
	if !ValidHostID(a.HostID) {
		return fmt.Errorf("host_id %s invalid", quoted(a.HostID))
	}
	if len(a.Apps) == 0 || len(a.Apps) > maxApps {
		return fmt.Errorf("apps must list 1 to %d apps", maxApps)
	}
	for _, app := range a.Apps {
		if !ValidApp(app) {
			return fmt.Errorf("app %s invalid", quoted(app))
		}
	}
	if err := CheckAddr(a.Addr); err != nil {
		return err
	}
	if !ValidScheme(a.Scheme) {
		return fmt.Errorf("scheme %s invalid (http, h2c, https or tls)", quoted(a.Scheme))
	}
	if _, err := ParsePublicKey(a.PublicKey); err != nil {
		return err
	}
	if a.TS <= 0 {
		return errors.New("ts missing")
	}
	return nil
}

// Validate reports the first thing wrong with hb.
func (hb *Heartbeat) Validate() error {
	if !ValidHostID(hb.HostID) {
		return fmt.Errorf("host_id %s invalid", quoted(hb.HostID))
	}
	if hb.TS <= 0 {
		return errors.New("ts missing")
	}
	if hb.Inflight < 0 {
		return errors.New("inflight negative")
	}
	return nil
}

// Validate reports the first thing wrong with l. An empty Sig is valid
// here: whether an unsigned leave counts is the gateway's decision, and it
// says so apart from a malformed one.
func (l *Leave) Validate() error {
	if !ValidHostID(l.HostID) {
		return fmt.Errorf("host_id %s invalid", quoted(l.HostID))
	}
	if l.TS <= 0 {
		return errors.New("ts missing")
	}
	if l.Sig != "" {
		// Strict still skips \r and \n; the exact length rules them out.
		b, err := base64.StdEncoding.Strict().DecodeString(l.Sig)
		if err != nil || len(l.Sig) != sigLen || len(b) != ed25519.SignatureSize {
			return errors.New("sig must be std base64 of a 64-byte ed25519 signature")
		}
	}
	return nil
}

// sigLen is the length of a signature in std base64.
var sigLen = base64.StdEncoding.EncodedLen(ed25519.SignatureSize)

// Validate reports the first thing wrong with r. The nonce must be std
// base64 of 16 to 64 bytes; the gateway id 1 to 253 printable bytes.
func (r *ChallengeRequest) Validate() error {
	if !ValidHostID(r.HostID) {
		return fmt.Errorf("host_id %s invalid", quoted(r.HostID))
	}
	if len(r.Nonce) > 2*maxNonceSize {
		return errors.New("nonce too long")
	}
	n, err := base64.StdEncoding.Strict().DecodeString(r.Nonce)
	// The decoder skips \r and \n, but the nonce enters the signed message
	// as sent: a newline there would let one signature mean two messages.
	if err != nil || strings.ContainsAny(r.Nonce, "\r\n") || len(n) < minNonceSize || len(n) > maxNonceSize {
		return errors.New("nonce must be std base64 of 16 to 64 bytes")
	}
	if r.Gateway == "" || len(r.Gateway) > 253 {
		return errors.New("gateway id missing or too long")
	}
	for i := 0; i < len(r.Gateway); i++ {
		if c := r.Gateway[i]; c <= ' ' || c >= 0x7f {
			return errors.New("gateway id must be printable ASCII")
		}
	}
	return nil
}

// ParseAnnounce decodes and validates an announce body.
func ParseAnnounce(b []byte) (Announce, error) {
	var a Announce
	if err := parse(b, &a, a.Validate); err != nil {
		return Announce{}, err
	}
	return a, nil
}

// ParseHeartbeat decodes and validates a heartbeat body.
func ParseHeartbeat(b []byte) (Heartbeat, error) {
	var hb Heartbeat
	if err := parse(b, &hb, hb.Validate); err != nil {
		return Heartbeat{}, err
	}
	return hb, nil
}

// ParseLeave decodes and validates a leave body.
func ParseLeave(b []byte) (Leave, error) {
	var l Leave
	if err := parse(b, &l, l.Validate); err != nil {
		return Leave{}, err
	}
	return l, nil
}

// parse decodes b into v (a pointer whose Validate method is validate).
func parse(b []byte, v any, validate func() error) error {
	if len(b) > MaxMessageSize {
		return fmt.Errorf("host: message of %d bytes exceeds %d", len(b), MaxMessageSize)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("host: bad json: %v", err)
	}
	if err := validate(); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	return nil
}
