package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// FuzzAppBody feeds arbitrary bytes to the app body decoder and
// validator: they must never panic, and whatever they accept must survive
// a JSON round trip and validate again (what the store keeps is what the
// gateway reads).
func FuzzAppBody(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"mode":"passthrough","status":"retired"}`,
		`{"cors":{"origins":["https://a.example:8443"],"allow_credentials":true,"allow_headers":["X-Y"]}}`,
		`{"rate_limit":{"requests":1,"window":"1s"}}`, `{"rate_limit":{"window":30}}`,
		`{"policy":[{"action":"deny","methods":["post"],"path":"/admin/*"}]}`,
		`{"health":{"path":"/healthz","interval":"5s"}}`, `{"id":"shop"}`, `[]`, `{"mode":`,
		// repeated keys and keys in another case: refused (checkKeys)
		`{"auth":{"required":true},"auth":{"required":false}}`, `{"auth":{"required":true},"Auth":{"Required":false}}`,
		`{"policy":[{"action":"deny","path":"/a","Path":"/b"}]}`, `{"\u017ftatus":"retired"}`,
	} {
		f.Add([]byte(s))
	}
	a := &API{o: Options{DefaultRateLimit: route.RateLimit{Requests: 600, Window: route.Duration(60e9)}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("PUT", "/api/v3/apps/shop", bytes.NewReader(body))
		var b appBody
		if err := decode(r, &b); err != nil {
			return
		}
		app, err := a.appFrom("shop", &b)
		if err != nil {
			return
		}
		j, err := json.Marshal(app)
		if err != nil {
			t.Fatalf("accepted app does not encode: %v", err)
		}
		var back route.App
		if err := json.Unmarshal(j, &back); err != nil {
			t.Fatalf("accepted app %s does not decode: %v", j, err)
		}
		if err := checkApp(&back); err != nil {
			t.Fatalf("accepted app %s fails validation after a round trip: %v", j, err)
		}
	})
}

// FuzzEntityTags feeds arbitrary field values to the If-Match parser: it
// must never panic, and what it accepts is "*" or well-formed entity
// tags, each of which parses again to itself; a tag matches itself under
// If-Match only when it is strong.
func FuzzEntityTags(f *testing.F) {
	for _, s := range []string{`*`, `"abc"`, `W/"abc"`, `"a", W/"b"`, `, "a",,"b"`, `"a" "b"`, `"unterminated`, `W/`, ``, `"a` + "\x7f" + `"`, "\"\x80\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"If-Match": {v}}
		tags, err := entityTags(h, "If-Match")
		if err != nil {
			if tags != nil {
				t.Fatalf("%q: refused with tags %q", v, tags)
			}
			return
		}
		if len(tags) == 0 {
			t.Fatalf("%q: accepted without a tag", v)
		}
		for _, tag := range tags {
			if tag == "*" {
				continue
			}
			again, rest, err := entityTag(tag)
			if err != nil || again != tag || rest != "" {
				t.Fatalf("%q: tag %q does not parse to itself: %q %q %v", v, tag, again, rest, err)
			}
			strong := !strings.HasPrefix(tag, "W/")
			if got := (precond{match: []string{tag}}).holds(tag); got != strong {
				t.Fatalf("If-Match %s against itself: %v", tag, got)
			}
		}
	})
}
