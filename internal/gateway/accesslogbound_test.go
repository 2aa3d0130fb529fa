package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-dev/gatehouse/internal/logcut"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestAccessLogBoundsClientValues: the access log repeats a client's
// Host, path and method, each of which can be as long as the header
// block; past a bound each is logged cut, with a marker naming its
// length, so a request cannot write a log line of its own size; the cut
// value, marker and all, is within the bound, so never longer than sent,
// a value just past its bound too. Values within the bounds are logged as
// sent.
func TestAccessLogBoundsClientValues(t *testing.T) {
	long := func(n int, unit string) string { return strings.Repeat(unit, n/len(unit)) }
	tests := []struct {
		name               string
		method, host, path string
		field              string // the field logged cut; the others as sent
	}{
		{name: "within bounds", method: "GET", host: "hello.apps.test", path: "/" + long(logcut.MaxPath-1, "p")},
		{name: "huge host", method: "GET", host: long(20000, "a") + ".apps.test", path: "/", field: "host"},
		{name: "huge path", method: "GET", host: "hello.apps.test", path: "/" + long(20000, "é"), field: "path"},
		{name: "huge method", method: "M" + long(5000, "X"), host: "hello.apps.test", path: "/", field: "method"},
		{name: "path just past its bound", method: "GET", host: "hello.apps.test", path: "/" + long(logcut.MaxPath, "p"), field: "path"},
		{name: "host just past its bound", method: "GET", host: long(logcut.MaxHost-9, "a") + ".apps.test", path: "/", field: "host"},
		{name: "method just past its bound", method: "M" + long(logcut.MaxMethod, "X"), host: "hello.apps.test", path: "/", field: "method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			readBody(t, e.do(tt.method, tt.host, tt.path, nil, nil))
			// The line is written after the answer went out.
			var line map[string]any
			testutil.WaitFor(t, 10*time.Second, func() bool {
				for _, l := range strings.Split(e.logs.String(), "\n") {
					if strings.Contains(l, `"msg":"request"`) {
						return json.Unmarshal([]byte(l), &line) == nil
					}
				}
				return false
			}, "no access log line")
			sent := map[string]string{"method": tt.method, "host": tt.host, "path": tt.path}
			bound := map[string]int{"method": logcut.MaxMethod, "host": logcut.MaxHost, "path": logcut.MaxPath}
			for k, v := range sent {
				got, _ := line[k].(string)
				if k != tt.field {
					if got != v {
						t.Errorf("%s logged as %.80q, want as sent (%d bytes)", k, got, len(v))
					}
					continue
				}
				marker := "...[truncated from " + strconv.Itoa(len(v)) + " bytes]"
				kept, ok := strings.CutSuffix(got, marker)
				if !ok || !strings.HasPrefix(v, kept) || len(got) > bound[k] || len(kept) < bound[k]-len(marker)-utf8.UTFMax || !utf8.ValidString(kept) {
					t.Errorf("%s of %d bytes logged as %d bytes ending %q; want at most %d bytes: as much of it as fits, cut at a character, then %q",
						k, len(v), len(got), got[max(0, len(got)-60):], bound[k], marker)
				}
			}
		})
	}
}
