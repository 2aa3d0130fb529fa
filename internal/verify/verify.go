package verify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
)

// Sentinel errors; every error [Host] returns wraps exactly one.
var (
	ErrBadClaim     = errors.New("verify: bad claim")              // the claim cannot be challenged (scheme, addr, key)
	ErrUnreachable  = errors.New("verify: host unreachable")       // dial, TLS or transport failure
	ErrTimeout      = errors.New("verify: host timed out")         // ctx deadline passed
	ErrBadResponse  = errors.New("verify: bad challenge response") // non-200, oversized or malformed answer
	ErrBadSignature = errors.New("verify: bad signature")          // well-formed answer that does not verify
)

// Reason maps an error from [Host] to a metrics label: bad_claim,
// unreachable, timeout, bad_response, bad_signature, or "other".
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrBadClaim):
		return "bad_claim"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	case errors.Is(err, ErrBadResponse):
		return "bad_response"
	case errors.Is(err, ErrBadSignature):
		return "bad_signature"
	}
	return "other"
}

// Claim is what a host announced about itself.
type Claim struct {
	HostID string
	Addr   string // host:port as announced; signed into the challenge
	Scheme string // http, h2c, https or tls
}

// NewClient returns the client [Host] uses when given nil: no proxy, no
// redirects, TLS without certificate checks (the signature is what is
// trusted, DESIGN §4), HTTP/1.1, and a 5 s overall timeout.
func NewClient() *http.Client {
	return &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: noRedirect,
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
			TLSClientConfig:        challengeTLS(nil),
			TLSHandshakeTimeout:    3 * time.Second,
			DisableKeepAlives:      true, // one challenge per host per verification: nothing to reuse
			MaxResponseHeaderBytes: 16 << 10,
		},
	}
}

// challengeTLS returns a copy of base (nil: a new config) that skips
// certificate checks, since trust comes from the Ed25519 signature
// (DESIGN §4), and offers ALPN http/1.1 and [host.ChallengeALPN], which
// a gateway never relays.
func challengeTLS(base *tls.Config) *tls.Config {
	c := &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	c.InsecureSkipVerify = true
	c.NextProtos = []string{"http/1.1", host.ChallengeALPN}
	return c
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Host challenges the host at claim.Addr with a fresh random nonce and
// checks its Ed25519 signature against pub. A nil client means
// [NewClient]'s; a given client is used as is except that redirects are
// never followed (a redirect would send the challenge elsewhere). The
// client's transport must accept the host's certificate for https and tls
// hosts, as NewClient's does. h2c hosts are challenged over HTTP/2 with
// prior knowledge, as the gateway proxies to them, when the client's
// transport is an *http.Transport (or nil). Bound the call with ctx.
func Host(ctx context.Context, client *http.Client, claim Claim, gatewayID string, pub ed25519.PublicKey) error {
	return challenge(ctx, client, claim, "", gatewayID, pub)
}

// challenge is [Host] connecting to dial (IP:port) when it is set: the
// URL, and so the Host header and the TLS server name, still name
// claim.Addr, which is what the host signs.
func challenge(ctx context.Context, client *http.Client, claim Claim, dial, gatewayID string, pub ed25519.PublicKey) error {
	u, err := challengeURL(claim)
	if err != nil {
		return err
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrBadClaim, len(pub))
	}
	var raw [host.NonceSize]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("verify: nonce: %v", err)
	}
	req := host.ChallengeRequest{
		Nonce:   base64.StdEncoding.EncodeToString(raw[:]),
		Gateway: gatewayID,
		HostID:  claim.HostID,
		TS:      time.Now().Unix(),
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadClaim, err)
	}
	sig, err := post(ctx, client, claim.Scheme == host.SchemeH2C, u, dial, req)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, host.ChallengeMessage(claim.HostID, claim.Addr, req.Nonce, gatewayID), sig) {
		return fmt.Errorf("%w: host %s at %s", ErrBadSignature, claim.HostID, claim.Addr)
	}
	return nil
}

func challengeURL(c Claim) (string, error) {
	if !host.ValidHostID(c.HostID) {
		return "", fmt.Errorf("%w: host id %q", ErrBadClaim, c.HostID)
	}
	if err := host.CheckAddr(c.Addr); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadClaim, err)
	}
	switch c.Scheme {
	case host.SchemeHTTP, host.SchemeH2C:
		return "http://" + c.Addr + host.ChallengePath, nil
	case host.SchemeHTTPS, host.SchemeTLS:
		return "https://" + c.Addr + host.ChallengePath, nil
	}
	return "", fmt.Errorf("%w: scheme %q", ErrBadClaim, c.Scheme)
}

// post sends the challenge (to dial, if set) and returns the decoded
// signature bytes.
func post(ctx context.Context, client *http.Client, h2c bool, url, dial string, cr host.ChallengeRequest) ([]byte, error) {
	if client == nil {
		client = NewClient()
	} else {
		c := *client
		c.CheckRedirect = noRedirect
		client = &c
	}
	if strings.HasPrefix(url, "https:") {
		// A given client's transport offers the marker too, so no
		// gateway's passthrough ever pipes the challenge on (see
		// challengeTLS); one that is not an *http.Transport is used as
		// it is.
		if base, ok := transportOf(client.Transport); ok && !offersMarker(base) {
			tr := base.Clone()
			tr.TLSClientConfig = challengeTLS(tr.TLSClientConfig)
			defer tr.CloseIdleConnections()
			client.Transport = tr
		}
	}
	if dial != "" {
		tr := PinnedTransport(client.Transport, dial)
		if tr == nil {
			return nil, fmt.Errorf("%w: the client's transport (%T) cannot be held to %s", ErrUnreachable, client.Transport, dial)
		}
		defer tr.CloseIdleConnections()
		client.Transport = tr
	}
	if h2c {
		// The proxy speaks only HTTP/2 to an h2c host: challenge it the
		// same way, so an h2c-only backend verifies and an HTTP/1.1-only
		// one cannot pass as h2c.
		if tr := H2CTransport(client.Transport); tr != nil {
			defer tr.CloseIdleConnections()
			client.Transport = tr
		}
	}
	body, _ := json.Marshal(cr)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadClaim, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return nil, fmt.Errorf("%w: %v", ErrTimeout, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusLoopDetected {
		return nil, fmt.Errorf("%w: status 508: the address reaches a gatehouse gateway, not the host (gateways never relay challenges)", ErrBadResponse)
	}
	if resp.StatusCode != http.StatusOK {
		// Every answer a gateway makes carries its cluster (DESIGN §3):
		// an addr naming a gateway's http listener in redirect mode
		// (308) or its https port over plain HTTP (400) reaches a
		// gateway as surely as a 508, and the status alone would not
		// say so.
		if resp.Header.Get(gatewayClusterField) != "" {
			return nil, fmt.Errorf("%w: status %d: the address reaches a gatehouse gateway, not the host (its answer carries %s)", ErrBadResponse, resp.StatusCode, gatewayClusterField)
		}
		return nil, fmt.Errorf("%w: status %d", ErrBadResponse, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, host.MaxChallengeSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading body: %v", ErrBadResponse, err)
	}
	if len(b) > host.MaxChallengeSize {
		return nil, fmt.Errorf("%w: body over %d bytes", ErrBadResponse, host.MaxChallengeSize)
	}
	var cresp host.ChallengeResponse
	if err := json.Unmarshal(b, &cresp); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrBadResponse, err)
	}
	// Exactly the 88 characters of padded std base64 (DESIGN §4): the
	// decoder skips line breaks even when strict, and a host agent must
	// not come to rely on a spelling the contract refuses.
	sig, err := base64.StdEncoding.Strict().DecodeString(cresp.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize || len(cresp.Signature) != base64.StdEncoding.EncodedLen(ed25519.SignatureSize) {
		return nil, fmt.Errorf("%w: signature is not padded std base64 of 64 bytes (88 characters, no line breaks)", ErrBadResponse)
	}
	return sig, nil
}

// gatewayClusterField is the field every gateway answer carries
// (cluster.HeaderCluster, which the layer table keeps verify from
// importing).
const gatewayClusterField = "X-Gatehouse-Cluster"

// offersMarker reports whether tr's TLS already offers
// [host.ChallengeALPN] (NewClient's does), so it needs no copy.
func offersMarker(tr *http.Transport) bool {
	return tr.TLSClientConfig != nil && slices.Contains(tr.TLSClientConfig.NextProtos, host.ChallengeALPN)
}

// transportOf returns rt (nil: http.DefaultTransport) as an
// *http.Transport, if it is one.
func transportOf(rt http.RoundTripper) (*http.Transport, bool) {
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	return tr, ok
}

// H2CTransport returns a copy of rt (nil: http.DefaultTransport) that
// speaks HTTP/2 with prior knowledge over plain TCP, as the proxy does to
// h2c hosts, or nil when rt is not an *http.Transport and must be used as
// it is. The caller closes its idle connections when done.
func H2CTransport(rt http.RoundTripper) *http.Transport {
	base, ok := transportOf(rt)
	if !ok {
		return nil
	}
	tr := base.Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// PinnedTransport returns a copy of rt (nil: http.DefaultTransport) whose
// every connection goes straight to dial (IP:port), whatever host the
// request's URL names: the URL's host still gives the Host header and the
// TLS server name, but is never resolved. nil when rt is not an
// *http.Transport. The caller closes its idle connections when done.
func PinnedTransport(rt http.RoundTripper, dial string) *http.Transport {
	base, ok := transportOf(rt)
	if !ok {
		return nil
	}
	tr := base.Clone()
	tr.Proxy = nil // a proxy would connect on our behalf, wherever the name points
	dc := tr.DialContext
	if dc == nil {
		dc = (&net.Dialer{Timeout: 3 * time.Second}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dc(ctx, network, dial)
	}
	if dtc := tr.DialTLSContext; dtc != nil {
		tr.DialTLSContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dtc(ctx, network, dial)
		}
	}
	//lint:ignore SA1019 clearing the deprecated hook: set, it would dial unpinned
	tr.DialTLS = nil
	return tr
}

// AddrResolver is the part of *net.Resolver that [Pin] uses.
type AddrResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ AddrResolver = (*net.Resolver)(nil)

// maxPinAddrs bounds the addresses of one name that [Pin] challenges.
const maxPinAddrs = 8

// Pin challenges the host as [Host] does, and returns the address
// (IP:port) that passed ("" with the error when none did): the one the
// host's traffic is to go to from then on. An IP literal claim.Addr is challenged as it is and is its own
// address. A host name is resolved once, with res (nil:
// net.DefaultResolver), and its addresses are challenged in the order
// they came (at most 8) until one passes; the error is the first
// address's when none does. The name is never resolved again for this
// check, so a name pointed elsewhere after the challenge cannot move
// where the host is dialed (DNS rebinding): the caller dials the address
// returned, never the name.
func Pin(ctx context.Context, client *http.Client, res AddrResolver, claim Claim, gatewayID string, pub ed25519.PublicKey) (string, error) {
	if _, err := challengeURL(claim); err != nil {
		return "", err
	}
	h, port, _ := net.SplitHostPort(claim.Addr) // checked by challengeURL
	if _, err := netip.ParseAddr(h); err == nil {
		if err := Host(ctx, client, claim, gatewayID, pub); err != nil {
			return "", err
		}
		return claim.Addr, nil
	}
	if res == nil {
		res = net.DefaultResolver
	}
	ips, err := res.LookupNetIP(ctx, "ip", h)
	if err != nil {
		if ctx.Err() != nil || isTimeout(err) {
			return "", fmt.Errorf("%w: resolving %s: %v", ErrTimeout, h, err)
		}
		return "", fmt.Errorf("%w: resolving %s: %v", ErrUnreachable, h, err)
	}
	var first error
	tried := 0
	for _, ip := range ips {
		if !ip.IsValid() || ip.Unmap().IsUnspecified() {
			continue // nothing to reach there; CheckAddr refuses it as a literal
		}
		if tried == maxPinAddrs {
			break
		}
		tried++
		dial := net.JoinHostPort(ip.Unmap().String(), port)
		err := challenge(ctx, client, claim, dial, gatewayID, pub)
		if err == nil {
			return dial, nil
		}
		if first == nil {
			first = fmt.Errorf("at %s: %w", dial, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		return "", fmt.Errorf("%w: %s resolves to no address to challenge", ErrUnreachable, h)
	}
	return "", first
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
