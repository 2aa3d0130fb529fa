package cluster

import (
	"encoding/base64"
	"testing"
)

func TestParsePeerFlag(t *testing.T) {
	pub, _ := newKey(t)
	b64 := base64.StdEncoding.EncodeToString(pub)
	p, err := ParsePeerFlag("eu=https://eu.example.net:8443,key=" + b64)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "eu" || p.URL != "https://eu.example.net:8443" || !p.PublicKey.Equal(pub) || p.Active {
		t.Fatalf("peer = %+v", p)
	}
	for _, bad := range []string{
		"",
		"eu",
		"eu=https://eu.example.net",
		"https://eu.example.net,key=" + b64,
		"EU=https://eu.example.net,key=" + b64,
		"eu=eu.example.net,key=" + b64,
		"eu=https://eu.example.net,key=" + b64[:20],
		"eu=https://eu.example.net,key=!!!",
	} {
		if _, err := ParsePeerFlag(bad); err == nil {
			t.Errorf("ParsePeerFlag(%q) passed", bad)
		}
	}
}

func FuzzParsePeerFlag(f *testing.F) {
	pub, _ := newKey(f)
	f.Add("eu=https://eu.example.net,key=" + base64.StdEncoding.EncodeToString(pub))
	f.Add("a=b,key=c")
	f.Fuzz(func(t *testing.T, v string) {
		p, err := ParsePeerFlag(v)
		if err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted %q: %v", v, err)
			}
		}
	})
}
