package host

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzChallengeHandler feeds arbitrary bodies to the internet-facing
// challenge endpoint: it never panics, answers 200 only to a valid
// challenge for its own host id, and then with a signature over exactly
// the documented message.
func FuzzChallengeHandler(f *testing.F) {
	k, _ := GenerateKey()
	h, err := New(Options{Conn: &nats.Conn{}, Cluster: "c1", HostID: "web-1", Key: k, Apps: []string{"hello"}, Addr: "127.0.0.1:9"})
	if err != nil {
		f.Fatal(err)
	}
	handler := h.ChallengeHandler()
	f.Add(`{"nonce":"AAAAAAAAAAAAAAAAAAAAAA==","gateway":"gw","host_id":"web-1","ts":1}`)
	f.Add(`{"nonce":"AAAAAAAAAAAAAAAAAAAAAA==","gateway":"gw\n","host_id":"web-1","ts":1}`)
	f.Add(`{"nonce":"AAAAAAAAAAAAAAAAAAAAAA","gateway":"gw","host_id":"web-1"}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, body string) {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodPost, ChallengePath, strings.NewReader(body)))
		if w.Code != http.StatusOK {
			return
		}
		var req ChallengeRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil || req.Validate() != nil || req.HostID != "web-1" {
			t.Fatalf("200 for an invalid challenge %q", body)
		}
		var resp ChallengeResponse
		json.Unmarshal(w.Body.Bytes(), &resp)
		sig, _ := base64.StdEncoding.DecodeString(resp.Signature)
		if !ed25519.Verify(k.Public().(ed25519.PublicKey), ChallengeMessage("web-1", "127.0.0.1:9", req.Nonce, req.Gateway), sig) {
			t.Fatal("signature not over the documented message")
		}
	})
}
