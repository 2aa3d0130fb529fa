package host

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

func TestSubjects(t *testing.T) {
	if s := AnnounceSubject("prod"); s != "gatehouse.prod.hosts.announce" {
		t.Error(s)
	}
	if s := HeartbeatSubject("prod"); s != "gatehouse.prod.hosts.heartbeat" {
		t.Error(s)
	}
	if s := LeaveSubject("prod"); s != "gatehouse.prod.hosts.leave" {
		t.Error(s)
	}
	if s := WildcardSubject("prod"); s != "gatehouse.prod.hosts.*" {
		t.Error(s)
	}
}

func TestChallengeMessage(t *testing.T) {
	got := string(ChallengeMessage("web-1", "10.0.0.5:8080", "bm9uY2U=", "gw-a"))
	want := "gatehouse-challenge-v1\nweb-1\n10.0.0.5:8080\nbm9uY2U=\ngw-a"
	if got != want {
		t.Fatalf("%q", got)
	}
}

func TestLeaveMessage(t *testing.T) {
	got := string(LeaveMessage("web-1", 1700000000))
	if want := "gatehouse-leave-v1\nweb-1\n1700000000"; got != want {
		t.Fatalf("%q", got)
	}
}

func TestWireJSON(t *testing.T) {
	a := Announce{HostID: "h", Apps: []string{"a"}, Addr: "127.0.0.1:1", Scheme: "http", PublicKey: opensslPub, TS: 7}
	b, _ := json.Marshal(a)
	if string(b) != `{"host_id":"h","apps":["a"],"addr":"127.0.0.1:1","scheme":"http","public_key":"`+opensslPub+`","ts":7}` {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(Heartbeat{HostID: "h", TS: 7, Inflight: 2})
	if string(b) != `{"host_id":"h","ts":7,"inflight":2}` {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(Leave{HostID: "h", TS: 7})
	if string(b) != `{"host_id":"h","ts":7}` {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(Leave{HostID: "h", TS: 7, Sig: "s"})
	if string(b) != `{"host_id":"h","ts":7,"sig":"s"}` {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(ChallengeRequest{Nonce: "n", Gateway: "g", HostID: "h", TS: 7})
	if string(b) != `{"nonce":"n","gateway":"g","host_id":"h","ts":7}` {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(ChallengeResponse{Signature: "s"})
	if string(b) != `{"signature":"s"}` {
		t.Fatal(string(b))
	}
}

func TestParseAnnounce(t *testing.T) {
	good := `{"host_id":"web-1","apps":["hello","shop"],"addr":"127.0.0.1:8081","scheme":"http","public_key":"` + opensslPub + `","ts":1700000000}`
	if a, err := ParseAnnounce([]byte(good)); err != nil || a.HostID != "web-1" || len(a.Apps) != 2 {
		t.Fatalf("good announce: %+v %v", a, err)
	}
	bad := map[string]string{
		"not json":     `{`,
		"no host_id":   strings.Replace(good, `"web-1"`, `""`, 1),
		"newline id":   strings.Replace(good, `"web-1"`, `"web\n1"`, 1),
		"no apps":      strings.Replace(good, `["hello","shop"]`, `[]`, 1),
		"bad app":      strings.Replace(good, `"hello"`, `"Hello!"`, 1),
		"port only":    strings.Replace(good, `127.0.0.1:8081`, `:8081`, 1),
		"unspecified":  strings.Replace(good, `127.0.0.1:8081`, `0.0.0.0:8081`, 1),
		"no port":      strings.Replace(good, `127.0.0.1:8081`, `127.0.0.1`, 1),
		"port zero":    strings.Replace(good, `127.0.0.1:8081`, `127.0.0.1:0`, 1),
		"port too big": strings.Replace(good, `127.0.0.1:8081`, `127.0.0.1:70000`, 1),
		// strconv.Atoi takes a sign, but a URL's port is digits only:
		// the challenge could never be sent there.
		"signed port": strings.Replace(good, `127.0.0.1:8081`, `127.0.0.1:+8081`, 1),
		// Brackets hold an IPv6 address only; url.Parse refuses the rest.
		"bracketed IPv4": strings.Replace(good, `127.0.0.1:8081`, `[127.0.0.1]:8081`, 1),
		"bracketed name": strings.Replace(good, `127.0.0.1:8081`, `[web-1.internal]:8081`, 1),
		"newline addr":   strings.Replace(good, `127.0.0.1:8081`, `a\nb:8081`, 1),
		"path in addr":   strings.Replace(good, `127.0.0.1:8081`, `a/b:8081`, 1),
		"scheme":         strings.Replace(good, `"http"`, `"ftp"`, 1),
		"short key":      strings.Replace(good, opensslPub, "AAAA", 1),
		"no ts":          strings.Replace(good, `1700000000`, `0`, 1),
		"wrong type":     strings.Replace(good, `1700000000`, `"now"`, 1),
		"oversized":      `{"host_id":"` + strings.Repeat("a", MaxMessageSize) + `"}`,
		"array":          `[]`,
		"null":           `null`,
	}
	for name, in := range bad {
		if _, err := ParseAnnounce([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, addr := range []string{"[::1]:8080", "[::ffff:10.0.0.1]:8080", "web-1.internal:443", "host_1.example:80"} {
		if err := CheckAddr(addr); err != nil {
			t.Errorf("CheckAddr(%q) = %v", addr, err)
		}
	}
}

func TestParseHeartbeatLeave(t *testing.T) {
	if _, err := ParseHeartbeat([]byte(`{"host_id":"h","ts":1,"inflight":0}`)); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{`{"host_id":"h","ts":1,"inflight":-1}`, `{"ts":1}`, `{"host_id":"h"}`, `x`} {
		if _, err := ParseHeartbeat([]byte(in)); err == nil {
			t.Errorf("heartbeat %s accepted", in)
		}
	}
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sig := SignLeave(k, "h", 1)
	for _, in := range []string{`{"host_id":"h","ts":1}`, `{"host_id":"h","ts":1,"sig":""}`, `{"host_id":"h","ts":1,"sig":"` + sig + `"}`} {
		if _, err := ParseLeave([]byte(in)); err != nil {
			t.Fatalf("leave %s: %v", in, err)
		}
	}
	short := base64.StdEncoding.EncodeToString(make([]byte, 63))
	for name, in := range map[string]string{
		"no host_id":     `{"ts":1}`,
		"no ts":          `{"host_id":"h"}`,
		"bad host_id":    `{"host_id":"h h","ts":1}`,
		"sig not base64": `{"host_id":"h","ts":1,"sig":"not base64!"}`,
		"sig unpadded":   `{"host_id":"h","ts":1,"sig":"` + strings.TrimRight(sig, "=") + `"}`,
		"sig url base64": `{"host_id":"h","ts":1,"sig":"` + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 64)) + `"}`,
		"sig 63 bytes":   `{"host_id":"h","ts":1,"sig":"` + short + `"}`,
		"sig 65 bytes":   `{"host_id":"h","ts":1,"sig":"` + base64.StdEncoding.EncodeToString(make([]byte, 65)) + `"}`,
		"sig newline":    `{"host_id":"h","ts":1,"sig":"` + sig[:40] + `\n` + sig[40:] + `"}`,
		"sig not string": `{"host_id":"h","ts":1,"sig":7}`,
	} {
		_, err := ParseLeave([]byte(in))
		if err == nil {
			t.Errorf("%s: leave accepted", name)
			continue
		}
		if strings.HasPrefix(name, "sig") && !strings.Contains(err.Error(), "sig") {
			t.Errorf("%s: error %q does not name sig", name, err)
		}
	}
}

// FuzzParse feeds bus message bodies to every parser: none may panic, and
// whatever one accepts must validate and re-encode.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"host_id":"web-1","apps":["hello"],"addr":"127.0.0.1:8081","scheme":"http","public_key":"` + opensslPub + `","ts":1}`))
	f.Add([]byte(`{"host_id":"h","ts":1,"inflight":3}`))
	f.Add([]byte(`{"host_id":"h","ts":1}`))
	f.Add([]byte(`{"host_id":"h","ts":1,"sig":"` + base64.StdEncoding.EncodeToString(make([]byte, 64)) + `"}`))
	f.Add([]byte(`{"nonce":"AAAAAAAAAAAAAAAAAAAAAA==","gateway":"g","host_id":"h","ts":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseAnnounce(b); err == nil {
			if a.Validate() != nil {
				t.Fatal("accepted announce does not validate")
			}
			if _, err := json.Marshal(a); err != nil {
				t.Fatal(err)
			}
			// A gateway must be able to send the challenge there.
			if u, err := url.Parse("https://" + a.Addr + ChallengePath); err != nil || u.Host != a.Addr {
				t.Fatalf("accepted addr %q makes no challenge URL: %v", a.Addr, err)
			}
		}
		if hb, err := ParseHeartbeat(b); err == nil && hb.Validate() != nil {
			t.Fatal("accepted heartbeat does not validate")
		}
		if l, err := ParseLeave(b); err == nil {
			if l.Validate() != nil {
				t.Fatal("accepted leave does not validate")
			}
			if sig, err := base64.StdEncoding.DecodeString(l.Sig); l.Sig != "" && (err != nil || len(sig) != 64) {
				t.Fatalf("accepted leave with sig %q", l.Sig)
			}
			if strings.ContainsAny(l.HostID, "\n") {
				t.Fatal("a valid leave carries a newline into the signed message")
			}
		}
		var r ChallengeRequest
		if json.Unmarshal(b, &r) == nil && r.Validate() == nil {
			if strings.ContainsAny(r.Nonce+r.Gateway+r.HostID, "\n") {
				t.Fatal("a valid challenge carries a newline into the signed message")
			}
		}
	})
}

// TestValidateQuotesABoundedField: a field a message's sender made as
// long as a message may be is quoted in part, with its length, in the
// error gateways log (and a challenge's 400 answers with); one of a
// host id's length is quoted whole.
func TestValidateQuotesABoundedField(t *testing.T) {
	long := strings.Repeat("\x01", MaxMessageSize-100)
	msgs := map[string]string{
		"announce host_id":  `{"host_id":"` + strings.Repeat(`\u0001`, 10000) + `"}`,
		"heartbeat host_id": `{"host_id":"` + strings.Repeat("é", 30000) + `","ts":1}`,
		"leave host_id":     `{"host_id":"` + strings.Repeat("-", 60000) + `","ts":1}`,
		"app":               `{"host_id":"web-1","apps":["` + strings.Repeat("a", 60000) + `"]}`,
		"scheme":            `{"host_id":"web-1","apps":["hello"],"addr":"10.0.0.5:80","scheme":"` + strings.Repeat("a", 60000) + `"}`,
	}
	for name, m := range msgs {
		var err error
		switch {
		case strings.HasPrefix(name, "heartbeat"):
			_, err = ParseHeartbeat([]byte(m))
		case strings.HasPrefix(name, "leave"):
			_, err = ParseLeave([]byte(m))
		default:
			_, err = ParseAnnounce([]byte(m))
		}
		if err == nil || len(err.Error()) > 1<<10 || !strings.Contains(err.Error(), " bytes)") {
			t.Errorf("%s of ~60 KiB: error of %d bytes: %.200v", name, len(fmtErr(err)), err)
		}
	}
	r := ChallengeRequest{HostID: long}
	if err := r.Validate(); err == nil || len(err.Error()) > 1<<10 {
		t.Errorf("challenge host_id of %d bytes: error of %d bytes", len(long), len(fmtErr(err)))
	}
	id := "-" + strings.Repeat("a", 127) // 128 bytes, invalid at its first
	if _, err := ParseLeave([]byte(`{"host_id":"` + id + `","ts":1}`)); err == nil || !strings.Contains(err.Error(), `"`+id+`" invalid`) {
		t.Errorf("a 128-byte host_id is not quoted whole: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
