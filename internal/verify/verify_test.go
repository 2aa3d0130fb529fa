package verify_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

func key(t *testing.T) ed25519.PrivateKey {
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signer answers challenges the way a correct host does, for hostID at
// the address it is told (which a dishonest test may set elsewhere).
func signer(k ed25519.PrivateKey, hostID string, addr func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, hostID, addr(), req.Nonce, req.Gateway)})
	}
}

func addrOf(s *httptest.Server) string { return s.Listener.Addr().String() }

func TestHost(t *testing.T) {
	k := key(t)
	pub := k.Public().(ed25519.PublicKey)
	other := key(t)

	var honestAddr string
	honest := httptest.NewServer(signer(k, "web-1", func() string { return honestAddr }))
	defer honest.Close()
	honestAddr = addrOf(honest)

	var tlsAddr string
	tlsHost := httptest.NewTLSServer(signer(k, "web-1", func() string { return tlsAddr }))
	defer tlsHost.Close()
	tlsAddr = addrOf(tlsHost)

	wrongKey := httptest.NewServer(signer(other, "web-1", func() string { return "" }))
	defer wrongKey.Close()
	wrongKeyAddr := addrOf(wrongKey)
	wrongKey.Config.Handler = signer(other, "web-1", func() string { return wrongKeyAddr })

	// A relay at another address forwards the challenge to the honest host:
	// the honest host signs its own address, which is not the claimed one.
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Post(honest.URL+host.ChallengePath, "application/json", r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	}))
	defer relay.Close()

	// A replay: the signature the honest host gave for an earlier nonce.
	var replayed string
	{
		nonce := base64.StdEncoding.EncodeToString(make([]byte, 32))
		replayed = host.SignChallenge(k, "web-1", "127.0.0.1:1", nonce, "gw")
	}
	var replayAddr string
	replay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: replayed})
	}))
	defer replay.Close()
	replayAddr = addrOf(replay)

	static := func(status int, body string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			io.WriteString(w, body)
		}))
		t.Cleanup(s.Close)
		return s
	}
	redirect := httptest.NewServer(http.RedirectHandler(honest.URL+host.ChallengePath, http.StatusTemporaryRedirect))
	defer redirect.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer slow.Close()
	defer close(release)

	deadAddr := testutil.RefusedAddr(t)

	tests := []struct {
		name   string
		claim  verify.Claim
		pub    ed25519.PublicKey
		want   error
		reason string
	}{
		{"honest http", verify.Claim{"web-1", honestAddr, "http"}, pub, nil, ""},
		{"h2c claim at an http/1.1-only host", verify.Claim{"web-1", honestAddr, "h2c"}, pub, verify.ErrUnreachable, "unreachable"},
		{"honest https, self-signed", verify.Claim{"web-1", tlsAddr, "https"}, pub, nil, ""},
		{"honest tls passthrough", verify.Claim{"web-1", tlsAddr, "tls"}, pub, nil, ""},
		{"other host id", verify.Claim{"web-2", honestAddr, "http"}, pub, verify.ErrBadSignature, "bad_signature"},
		{"wrong key", verify.Claim{"web-1", addrOf(wrongKey), "http"}, pub, verify.ErrBadSignature, "bad_signature"},
		{"relayed to the real host", verify.Claim{"web-1", addrOf(relay), "http"}, pub, verify.ErrBadSignature, "bad_signature"},
		{"replayed signature", verify.Claim{"web-1", replayAddr, "http"}, pub, verify.ErrBadSignature, "bad_signature"},
		{"no key here (404)", verify.Claim{"web-1", addrOf(static(404, "no")), "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"500", verify.Claim{"web-1", addrOf(static(500, "")), "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"not json", verify.Claim{"web-1", addrOf(static(200, "hello")), "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"short signature", verify.Claim{"web-1", addrOf(static(200, `{"signature":"AAAA"}`)), "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"oversized", verify.Claim{"web-1", addrOf(static(200, `{"signature":"`+strings.Repeat("A", 8000)+`"}`)), "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"redirect not followed", verify.Claim{"web-1", addrOf(redirect), "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"http claim at a tls host", verify.Claim{"web-1", tlsAddr, "http"}, pub, verify.ErrBadResponse, "bad_response"},
		{"unreachable", verify.Claim{"web-1", deadAddr, "http"}, pub, verify.ErrUnreachable, "unreachable"},
		{"timeout", verify.Claim{"web-1", addrOf(slow), "http"}, pub, verify.ErrTimeout, "timeout"},
		{"bad scheme", verify.Claim{"web-1", honestAddr, "ftp"}, pub, verify.ErrBadClaim, "bad_claim"},
		{"bad addr", verify.Claim{"web-1", ":80", "http"}, pub, verify.ErrBadClaim, "bad_claim"},
		{"bad host id", verify.Claim{"web 1", honestAddr, "http"}, pub, verify.ErrBadClaim, "bad_claim"},
		{"bad key", verify.Claim{"web-1", honestAddr, "http"}, pub[:5], verify.ErrBadClaim, "bad_claim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.claim.Scheme == "" {
				tt.claim.Scheme = "http"
			}
			// Long enough for a TLS handshake on a busy machine; the
			// "timeout" case waits all of it out.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			err := verify.Host(ctx, nil, tt.claim, "gw-1", tt.pub)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if r := verify.Reason(err); r != tt.reason {
				t.Fatalf("reason %q, want %q", r, tt.reason)
			}
		})
	}
}

// Every challenge carries a fresh nonce, so no answer can be reused.
func TestNoncesAreFresh(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	k := key(t)
	var addr string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		dup := seen[req.Nonce]
		seen[req.Nonce] = true
		mu.Unlock()
		if dup || req.Gateway != "gw-1" || req.HostID != "web-1" || req.TS == 0 {
			http.Error(w, "reused nonce or missing field", 400)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	defer s.Close()
	addr = addrOf(s)
	for range 20 {
		if err := verify.Host(t.Context(), s.Client(), verify.Claim{"web-1", addr, "http"}, "gw-1", k.Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 20 {
		t.Fatalf("%d distinct nonces in 20 challenges", len(seen))
	}
}

// Every challenge over TLS offers host.ChallengeALPN after http/1.1, with
// the default client and with a given one, so that no gateway's
// passthrough pipes it on; a host whose server speaks h2 and http/1.1
// still picks http/1.1 and passes.
func TestChallengeOffersItsALPN(t *testing.T) {
	k := key(t)
	var mu sync.Mutex
	var offered [][]string
	var addr string
	srv := httptest.NewUnstartedServer(signer(k, "web-1", func() string { return addr }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	addr = addrOf(srv)
	base := srv.TLS.Clone()
	srv.TLS.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		offered = append(offered, hello.SupportedProtos)
		mu.Unlock()
		return base, nil
	}
	given := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, client := range []*http.Client{nil, given} {
		for _, scheme := range []string{"https", "tls"} {
			if err := verify.Host(t.Context(), client, verify.Claim{HostID: "web-1", Addr: addr, Scheme: scheme}, "gw-1", k.Public().(ed25519.PublicKey)); err != nil {
				t.Fatalf("%s, given client %v: %v", scheme, client != nil, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(offered) != 4 {
		t.Fatalf("%d handshakes, want 4", len(offered))
	}
	for i, p := range offered {
		if strings.Join(p, ",") != "http/1.1,"+host.ChallengeALPN {
			t.Errorf("challenge %d offered ALPN %q", i, p)
		}
	}
}

// A gateway answers a challenge that reached it 508 (it never relays
// one); the error says what that means. So does any other refusal that
// carries X-Gatehouse-Cluster, which every gateway answer does: an addr
// that names a gateway's http listener in redirect mode (308), or its
// https port over plain HTTP (400), reaches a gateway all the same, and
// "status 308" alone did not say so. A host's own refusal is not blamed
// on a gateway.
func TestChallengeAtAGateway(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  int
		cluster string // X-Gatehouse-Cluster, if any
		gateway bool   // the error names a gateway
	}{
		{"508", http.StatusLoopDetected, "", true},
		{"redirect listener", http.StatusPermanentRedirect, "local", true},
		{"https port over plain HTTP", http.StatusBadRequest, "local", true},
		{"a host's 404", http.StatusNotFound, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.cluster != "" {
					w.Header().Set("X-Gatehouse-Cluster", c.cluster)
					w.Header().Set("Location", "https://127.0.0.1:8443/")
				}
				w.WriteHeader(c.status)
			}))
			defer gw.Close()
			err := verify.Host(t.Context(), nil, verify.Claim{HostID: "web-1", Addr: addrOf(gw), Scheme: "http"}, "gw-1", key(t).Public().(ed25519.PublicKey))
			if !errors.Is(err, verify.ErrBadResponse) || !strings.Contains(err.Error(), fmt.Sprintf("status %d", c.status)) {
				t.Fatalf("err = %v, want bad_response naming status %d", err, c.status)
			}
			if got := strings.Contains(err.Error(), "reaches a gatehouse gateway"); got != c.gateway {
				t.Errorf("err = %v: names a gateway %v, want %v", err, got, c.gateway)
			}
		})
	}
}

// DESIGN §4: the signature is padded std base64 (not URL-safe) and
// anything else is bad_response. A right signature spelled otherwise
// (line breaks, as MIME encoders such as Python's base64.encodebytes
// add; no padding; the URL-safe alphabet) is refused, so a host agent
// written against one gateway does not rely on a leniency the contract
// does not give; the exact spelling passes.
func TestSignatureSpelling(t *testing.T) {
	k := key(t)
	pub := k.Public().(ed25519.PublicKey)
	for _, c := range []struct {
		name  string
		spell func(sig string) string
		want  error
	}{
		{"padded std base64", func(s string) string { return s }, nil},
		{"MIME line breaks", func(s string) string { return s[:76] + "\n" + s[76:] + "\n" }, verify.ErrBadResponse},
		{"CRLF inside", func(s string) string { return s[:40] + "\r\n" + s[40:] }, verify.ErrBadResponse},
		{"unpadded", func(s string) string { return strings.TrimRight(s, "=") }, verify.ErrBadResponse},
		{"URL-safe", func(s string) string {
			b, _ := base64.StdEncoding.DecodeString(s)
			return base64.URLEncoding.EncodeToString(b)
		}, verify.ErrBadResponse},
	} {
		t.Run(c.name, func(t *testing.T) {
			var addr string
			var same atomic.Bool // the spelling served was the signature's own
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req host.ChallengeRequest
				if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
					http.Error(w, "bad", 400)
					return
				}
				sig := host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)
				spelled := c.spell(sig)
				same.Store(spelled == sig)
				json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: spelled})
			}))
			defer s.Close()
			addr = addrOf(s)
			// A signature with no '+' or '/' (about 1 in 16) is spelled
			// alike in URL-safe base64: that challenge says nothing of
			// the spelling, and another nonce is asked for.
			for try := 0; ; try++ {
				err := verify.Host(t.Context(), nil, verify.Claim{HostID: "web-1", Addr: addr, Scheme: "http"}, "gw-1", pub)
				if c.want != nil && same.Load() && try < 50 {
					continue
				}
				if c.want == nil && err != nil {
					t.Fatalf("err = %v", err)
				}
				if c.want != nil && !errors.Is(err, c.want) {
					t.Fatalf("err = %v, want %v", err, c.want)
				}
				break
			}
		})
	}
}
