package cluster

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestAnnouncement(t *testing.T) {
	pub, priv := newKey(t)
	_, other := newKey(t)
	now := time.Unix(1_764_439_200, 0)
	enc := func(a Announcement) []byte { b, _ := json.Marshal(a); return b }
	good := Announce(priv, "eu", "https://eu.example.net", now)
	p, err := ParseAnnouncement(enc(good), now.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "eu" || p.URL != "https://eu.example.net" || !p.PublicKey.Equal(pub) || p.Active {
		t.Fatalf("peer = %+v", p)
	}
	tampered := func(f func(*Announcement)) []byte { a := good; f(&a); return enc(a) }
	stranger := Announce(other, "eu", "https://eu.example.net", now)
	stranger.PublicKey = good.PublicKey // claims eu's key, signed by another
	bad := map[string][]byte{
		"not json":     []byte("{"),
		"trailing":     append(enc(good), []byte("{}")...),
		"empty":        []byte("{}"),
		"unsigned":     tampered(func(a *Announcement) { a.Sig = "" }),
		"url changed":  tampered(func(a *Announcement) { a.URL = "https://evil.example.net" }),
		"id changed":   tampered(func(a *Announcement) { a.ID = "us" }),
		"ts changed":   tampered(func(a *Announcement) { a.TS++ }),
		"bad key":      tampered(func(a *Announcement) { a.PublicKey = "AAAA" }),
		"bad id":       enc(Announce(priv, "EU!", "https://eu.example.net", now)),
		"bad url":      enc(Announce(priv, "eu", "gopher://eu", now)),
		"stale":        enc(Announce(priv, "eu", "https://eu.example.net", now.Add(-31*time.Second))),
		"wrong signer": enc(stranger),
		"too large":    make([]byte, MaxAnnouncement+1),
		"sig not b64":  tampered(func(a *Announcement) { a.Sig = "!!" }),
	}
	for name, data := range bad {
		if _, err := ParseAnnouncement(data, now); !errors.Is(err, ErrAnnouncement) {
			t.Errorf("%s: err = %v, want ErrAnnouncement", name, err)
		}
	}
}

func FuzzParseAnnouncement(f *testing.F) {
	_, priv := newKey(f)
	now := time.Unix(1_764_439_200, 0)
	b, _ := json.Marshal(Announce(priv, "eu", "https://eu.example.net", now))
	f.Add(b)
	f.Add([]byte(`{"id":"eu"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseAnnouncement(data, now)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid peer: %v", err)
		}
	})
}
