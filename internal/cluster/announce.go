package cluster

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Subject is the bus subject clusters announce themselves on.
const Subject = "gatehouse.clusters"

// MaxAnnouncement bounds an announcement's size on the wire.
const MaxAnnouncement = 4 << 10

// ErrAnnouncement is wrapped by every [ParseAnnouncement] error.
var ErrAnnouncement = errors.New("cluster: bad announcement")

// Announcement is the JSON a gateway publishes on [Subject] every
// announce interval: its cluster's id, URL and public key, a unix ts, and
// the cluster key's signature over
// "gatehouse-cluster-v1\n" + id + "\n" + url + "\n" + public_key + "\n" + ts.
type Announcement struct {
	ID        string `json:"id"`
	URL       string `json:"url"`
	PublicKey string `json:"public_key"` // standard base64 of the 32-byte key
	TS        int64  `json:"ts"`
	Sig       string `json:"sig"` // standard base64
}

func (a Announcement) message() []byte {
	return []byte("gatehouse-cluster-v1\n" + a.ID + "\n" + a.URL + "\n" + a.PublicKey + "\n" + strconv.FormatInt(a.TS, 10))
}

// Announce signs an announcement of cluster id at url with key.
func Announce(key ed25519.PrivateKey, id, url string, now time.Time) Announcement {
	a := Announcement{
		ID:        id,
		URL:       url,
		PublicKey: base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)),
		TS:        now.Unix(),
	}
	a.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, a.message()))
	return a
}

// ParseAnnouncement decodes and checks an announcement: well-formed JSON
// of at most [MaxAnnouncement] bytes, a valid peer, a ts within
// [MarkWindow] of now, and a signature that verifies with the key inside.
// That proves only that the sender holds that key; whether the key may
// speak for the id is the caller's trust decision (internal/peers).
// The returned peer is not marked active.
func ParseAnnouncement(data []byte, now time.Time) (Peer, error) {
	if len(data) > MaxAnnouncement {
		return Peer{}, fmt.Errorf("%w: %d bytes", ErrAnnouncement, len(data))
	}
	var a Announcement
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&a); err != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrAnnouncement, err)
	}
	if dec.More() {
		return Peer{}, fmt.Errorf("%w: trailing data", ErrAnnouncement)
	}
	key, err := base64.StdEncoding.DecodeString(a.PublicKey)
	if err != nil {
		return Peer{}, fmt.Errorf("%w: public_key: %v", ErrAnnouncement, err)
	}
	p := Peer{ID: a.ID, URL: a.URL, PublicKey: key}
	if err := p.Validate(); err != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrAnnouncement, err)
	}
	if d := now.Unix() - a.TS; d > int64(MarkWindow/time.Second) || d < -int64(MarkWindow/time.Second) {
		return Peer{}, fmt.Errorf("%w: ts %d is more than %s from now", ErrAnnouncement, a.TS, MarkWindow)
	}
	sig, err := base64.StdEncoding.DecodeString(a.Sig)
	if err != nil || !ed25519.Verify(p.PublicKey, a.message(), sig) {
		return Peer{}, fmt.Errorf("%w: signature of %q does not verify", ErrAnnouncement, a.ID)
	}
	return p, nil
}
