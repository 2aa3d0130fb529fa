package edge

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestLaneServesPlainRequests: in serve mode the lane answers plain GET
// and HEAD requests on the http listener, net/http the rest (a body here)
// on the same connection, which then stays with net/http; DisableLane
// leaves everything to net/http.
func TestLaneServesPlainRequests(t *testing.T) {
	writerOf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%T", w)
	})
	for _, tc := range []struct {
		disable         bool
		wantGet, wantPo string
	}{
		{false, "*lane.writer", "*http.response"},
		{true, "*http.response", "*http.response"},
	} {
		t.Run(fmt.Sprintf("DisableLane=%v", tc.disable), func(t *testing.T) {
			e := start(t, Options{HTTPMode: ModeServe, Handler: writerOf, DisableLane: tc.disable})
			c := &http.Client{} // one keep-alive connection for all three
			for _, req := range []struct{ method, want string }{{"GET", tc.wantGet}, {"POST", tc.wantPo}, {"GET", tc.wantPo}} {
				var body io.Reader
				if req.method == "POST" {
					body = strings.NewReader("a body")
				}
				r, _ := http.NewRequest(req.method, "http://"+e.http+"/", body)
				r.Host = "app." + zone
				resp, err := c.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != req.want {
					t.Errorf("%s served through %s, want %s", req.method, b, req.want)
				}
			}
		})
	}
}
