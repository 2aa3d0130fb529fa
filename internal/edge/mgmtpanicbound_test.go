package edge

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestManagementPanicLogBoundsMethodAndPath: the error a management
// route's panic logs repeats the request's method and path, which a
// client may send as long as the header block allows; past the access
// log's bounds each is logged cut with its marker, so a request cannot
// write a line of its own size (the stack is the process's, not the
// client's).
func TestManagementPanicLogBoundsMethodAndPath(t *testing.T) {
	var logs testutil.SyncBuffer
	mgmt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	e := start(t, Options{Management: mgmt, Cluster: "c1",
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	long := strings.Repeat("x", 4999)
	for i, c := range []struct {
		method, path string
		field        string // the one cut
		bound        int
	}{
		{"M" + long, "/boom", "method", 64},
		{http.MethodGet, "/" + long, "path", 2048},
	} {
		req, err := http.NewRequest(c.method, "http://"+e.mgmt+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("%s: answered %d, want 500", c.field, resp.StatusCode)
		}
		var fields map[string]any
		testutil.WaitFor(t, 5*time.Second, func() bool {
			n := 0 // this request's line is the i-th
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `"msg":"edge: panic serving a management request"`) {
					if n == i {
						return json.Unmarshal([]byte(l), &fields) == nil
					}
					n++
				}
			}
			return false
		}, "no panic line")
		sent := map[string]string{"method": c.method, "path": c.path}[c.field]
		got, _ := fields[c.field].(string)
		marker := "...[truncated from " + strconv.Itoa(len(sent)) + " bytes]"
		if len(got) > c.bound || !strings.HasSuffix(got, marker) || !strings.HasPrefix(sent, strings.TrimSuffix(got, marker)) {
			t.Errorf("%s of %d bytes logged as %d bytes ending %q; want at most %d, ending %q", c.field, len(sent), len(got), got[max(0, len(got)-60):], c.bound, marker)
		}
	}
}
