package store

import (
	"regexp"
	"strings"
	"testing"
)

// validKV mirrors nats.go's key check (jetstream/kv.go keyValid).
var validKVRe = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func validKV(k string) bool {
	return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && validKVRe.MatchString(k)
}

func TestNameKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"hello", "hello"},
		{"www.shop.test", "www.shop.test"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"*.apps.example.com", "_2A.apps.example.com"},
		{"_acme-challenge.x", "_5Facme-challenge.x"},
		{".", "_2E"},
		{"a.", "a_2E"},
		{".a", "_2Ea"},
		{"a..b", "a_2E.b"},
		{"a b/c>", "a_20b_2Fc_3E"},
		{"Host_1", "Host_5F1"},
		{"é", "_C3_A9"},
	}
	for _, tt := range tests {
		got, err := nameKey(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("nameKey(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			continue
		}
		if !validKV(got) {
			t.Errorf("nameKey(%q) = %q is not a valid KV key", tt.in, got)
		}
		back, err := parseNameKey(got)
		if err != nil || back != tt.in {
			t.Errorf("parseNameKey(%q) = %q, %v; want %q", got, back, err, tt.in)
		}
	}
	if _, err := nameKey(""); err == nil {
		t.Error("empty name accepted")
	}
}

func TestParseKeyRejectsNonCanonical(t *testing.T) {
	// "_41" is 'A', which is never escaped; "a_2E_2Eb" is "a..b", whose
	// canonical key is "a_2E.b".
	for _, k := range []string{"", "_", "_2", "_2g", "_2e", "_41", "a_2E_2Eb"} {
		if s, err := parseNameKey(k); err == nil {
			t.Errorf("parseNameKey(%q) = %q, want error", k, s)
		}
	}
	if _, err := parseTokensKey("a.b_2Ec"); err != nil {
		t.Errorf("tokens: %v", err)
	}
	if _, err := parseTokensKey("a.b.c"); err != nil {
		t.Errorf("tokens: %v", err)
	}
	if _, _, _, err := parseRecordKey("a.b"); err == nil {
		t.Error("two-part record key accepted")
	}
}

func TestRecordAndPathKeys(t *testing.T) {
	k, err := recordKey("apps.example.com", "*", "A")
	if err != nil || k != "apps_2Eexample_2Ecom._2A.A" || !validKV(k) {
		t.Fatalf("recordKey = %q, %v", k, err)
	}
	z, n, ty, err := parseRecordKey(k)
	if err != nil || z != "apps.example.com" || n != "*" || ty != "A" {
		t.Fatalf("parseRecordKey = %q %q %q %v", z, n, ty, err)
	}
	for _, bad := range [][3]string{{"", "a", "A"}, {"z", "", "A"}, {"z", "a", ""}} {
		if _, err := recordKey(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("recordKey%v accepted", bad)
		}
	}
	p := "certificates/acme-v02.api.letsencrypt.org-directory/example.com/example.com.crt"
	k, err = pathKey(p)
	if err != nil || !validKV(k) || strings.Count(k, ".") != 3 {
		t.Fatalf("pathKey = %q, %v", k, err)
	}
	if back, err := parsePathKey(k); err != nil || back != p {
		t.Fatalf("parsePathKey = %q, %v", back, err)
	}
	for _, bad := range []string{"", "/a", "a/", "a//b"} {
		if _, err := pathKey(bad); err == nil {
			t.Errorf("pathKey(%q) accepted", bad)
		}
	}
}

func FuzzKeys(f *testing.F) {
	for _, s := range []string{"hello", "*.x", "a..b", ".", "_", "a/b/c.crt", "é", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" {
			return
		}
		for _, keep := range []bool{true, false} {
			k := escape(s, keep)
			if !validKV(k) {
				t.Fatalf("escape(%q, %v) = %q: invalid KV key", s, keep, k)
			}
			if !keep && strings.Contains(k, ".") {
				t.Fatalf("token %q has a dot", k)
			}
			back, err := unescape(k, keep)
			if err != nil || back != s {
				t.Fatalf("unescape(%q) = %q, %v; want %q", k, back, err, s)
			}
			// Anything that decodes re-encodes to itself.
			if d, err := unescape(s, keep); err == nil && escape(d, keep) != s {
				t.Fatalf("unescape(%q) = %q is not canonical", s, d)
			}
		}
		if p, err := pathKey(s); err == nil {
			if back, err := parsePathKey(p); err != nil || back != s {
				t.Fatalf("path %q -> %q -> %q, %v", s, p, back, err)
			}
		}
	})
}
