package cluster

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Headers of a forwarded request (DESIGN §5.3). A client's copies are
// stripped by the gateway's hygiene layer before anything reads them.
const (
	HeaderForwarded = "X-Gatehouse-Forwarded" // {from_cluster}
	HeaderClient    = "X-Gatehouse-Client"    // ip={client_ip}; ts={unix}; sig={b64}
	// HeaderFailover names the peer cluster that served a failed-over
	// response; HeaderCluster the cluster that served any response.
	HeaderFailover = "X-Failover-Cluster"
	HeaderCluster  = "X-Gatehouse-Cluster"
	// HeaderNoHost is on the 503 an owner answers a forwarded request
	// with when it has no routable host for the app: no host saw the
	// request, so the forwarding gateway may serve it itself, a write
	// included. Its value signs the forward's own X-Gatehouse-Client
	// mark ([SignNoHost]); the forwarding gateway removes it.
	HeaderNoHost = "X-Gatehouse-No-Host"
)

// MarkWindow is how far a mark's ts may be from the receiver's clock.
const MarkWindow = 30 * time.Second

// Errors of [VerifyClient]; each wrapped with detail.
var (
	ErrMalformed = errors.New("cluster: malformed mark")
	ErrExpired   = errors.New("cluster: mark outside the 30s window")
	ErrSignature = errors.New("cluster: bad mark signature")
)

const clientMarkContext = "gatehouse-client-v1"

// clientMessage is what a mark signs:
// "gatehouse-client-v1\n" + from + "\n" + ip + "\n" + ts + "\n" + host.
func clientMessage(from, ip, ts, host string) []byte {
	return []byte(clientMarkContext + "\n" + from + "\n" + ip + "\n" + ts + "\n" + host)
}

// SignClient returns the X-Gatehouse-Client value with which cluster from
// vouches that it received a request for host from clientIP at ts. host is
// the Host header as sent (a forward keeps the original Host).
func SignClient(key ed25519.PrivateKey, from, clientIP string, ts time.Time, host string) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	sig := ed25519.Sign(key, clientMessage(from, clientIP, t, host))
	return "ip=" + clientIP + "; ts=" + t + "; sig=" + base64.StdEncoding.EncodeToString(sig)
}

const noHostContext = "gatehouse-nohost-v1"

// noHostMessage is what a no-host answer signs:
// "gatehouse-nohost-v1\n" + owner + "\n" + the forward's X-Gatehouse-Client.
func noHostMessage(owner, mark string) []byte {
	return []byte(noHostContext + "\n" + owner + "\n" + mark)
}

// SignNoHost returns the X-Gatehouse-No-Host value with which cluster
// owner says it has no host for the request whose X-Gatehouse-Client was
// mark. Bound to that mark, the answer cannot be replayed for another
// forward, and only the owner's key makes it: a host behind the owner
// that answers 503 cannot pass its own answer off as one no host saw.
func SignNoHost(key ed25519.PrivateKey, owner, mark string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, noHostMessage(owner, mark)))
}

// VerifyNoHost reports whether value is owner's no-host answer to the
// forward that carried mark, checked with pub (owner's key, as discovery
// knows it).
func VerifyNoHost(pub ed25519.PublicKey, owner, mark, value string) bool {
	sig, err := base64.StdEncoding.DecodeString(value)
	return err == nil && len(sig) == ed25519.SignatureSize && len(pub) == ed25519.PublicKeySize &&
		mark != "" && ed25519.Verify(pub, noHostMessage(owner, mark), sig)
}

// ClientMark is a parsed X-Gatehouse-Client value, not yet verified.
type ClientMark struct {
	IP  netip.Addr
	ip  string // as signed
	TS  int64  // unix seconds
	ts  string // as signed
	Sig []byte
}

// ParseClient parses an X-Gatehouse-Client value. The ip must be in
// canonical form (what netip prints), so one address has one signature.
func ParseClient(v string) (ClientMark, error) {
	var m ClientMark
	var have [3]bool
	if len(v) > 512 {
		return m, fmt.Errorf("%w: %d bytes", ErrMalformed, len(v))
	}
	for part := range strings.SplitSeq(v, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return m, fmt.Errorf("%w: %q is not key=value", ErrMalformed, part)
		}
		switch k {
		case "ip":
			a, err := netip.ParseAddr(val)
			if err != nil || a.String() != val || a.Zone() != "" {
				return m, fmt.Errorf("%w: ip %q", ErrMalformed, val)
			}
			m.IP, m.ip, have[0] = a, val, true
		case "ts":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 || strconv.FormatInt(n, 10) != val {
				return m, fmt.Errorf("%w: ts %q", ErrMalformed, val)
			}
			m.TS, m.ts, have[1] = n, val, true
		case "sig":
			s, err := base64.StdEncoding.DecodeString(val)
			if err != nil || len(s) != ed25519.SignatureSize {
				return m, fmt.Errorf("%w: sig", ErrMalformed)
			}
			m.Sig, have[2] = s, true
		default:
			return m, fmt.Errorf("%w: unknown key %q", ErrMalformed, k)
		}
	}
	if have != [3]bool{true, true, true} {
		return m, fmt.Errorf("%w: want ip, ts and sig", ErrMalformed)
	}
	return m, nil
}

// VerifyClient checks a mark that cluster from put on a request for host:
// the value parses, its ts is within [MarkWindow] of now, and its signature
// verifies with pub (from's key, as discovery knows it; never a key from
// the request). It returns the client address the mark vouches for.
func VerifyClient(pub ed25519.PublicKey, from, value, host string, now time.Time) (netip.Addr, error) {
	m, err := ParseClient(value)
	if err != nil {
		return netip.Addr{}, err
	}
	if d := now.Unix() - m.TS; d > int64(MarkWindow/time.Second) || d < -int64(MarkWindow/time.Second) {
		return netip.Addr{}, fmt.Errorf("%w: ts %d, now %d", ErrExpired, m.TS, now.Unix())
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, clientMessage(from, m.ip, m.ts, host), m.Sig) {
		return netip.Addr{}, fmt.Errorf("%w: from %q", ErrSignature, from)
	}
	return m.IP, nil
}
