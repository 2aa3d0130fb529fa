package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestSidecarLogBoundsThePath: the sidecar's warnings about a request its
// app did not answer, and about one that came back to it, repeat the
// request's path, which whoever reaches the sidecar may send as long as
// the header block allows; past the gateway's access log bound it is
// logged cut with the same marker, so a request cannot write a line of
// its own size.
func TestSidecarLogBoundsThePath(t *testing.T) {
	path := "/" + strings.Repeat("p", 4999)
	marker := "...[truncated from " + strconv.Itoa(len(path)) + " bytes]"
	refused, err := url.Parse("http://" + testutil.RefusedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	// A sidecar whose -upstream is itself: every request comes back.
	var loopLog testutil.SyncBuffer
	loop := httptest.NewUnstartedServer(nil)
	self, err := url.Parse("http://" + loop.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	loop.Config.Handler = sidecarProxy(self, "", slog.New(slog.NewJSONHandler(&loopLog, nil)))
	loop.Start()
	t.Cleanup(loop.Close)
	var downLog testutil.SyncBuffer
	down := httptest.NewServer(sidecarProxy(refused, "", slog.New(slog.NewJSONHandler(&downLog, nil))))
	t.Cleanup(down.Close)

	for _, c := range []struct {
		srv    *httptest.Server
		log    *testutil.SyncBuffer
		status int
		msg    string
	}{
		{down, &downLog, http.StatusBadGateway, "host: upstream failed"},
		{loop, &loopLog, http.StatusLoopDetected, "host: a request came back to this sidecar: -upstream leads back to it"},
	} {
		tr := &http.Transport{}
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(c.srv.URL + path)
		if err != nil {
			t.Fatalf("%s: %v", c.msg, err)
		}
		res.Body.Close()
		tr.CloseIdleConnections()
		if res.StatusCode != c.status {
			t.Fatalf("%s: answered %d, want %d", c.msg, res.StatusCode, c.status)
		}
		var fields map[string]any
		var line string
		testutil.WaitFor(t, 5*time.Second, func() bool {
			for _, l := range strings.Split(c.log.String(), "\n") {
				if strings.Contains(l, `"msg":"`+c.msg+`"`) {
					line = l
					return json.Unmarshal([]byte(l), &fields) == nil
				}
			}
			return false
		}, "not logged: "+c.msg)
		got, _ := fields["path"].(string)
		if len(got) > 2048 || !strings.HasSuffix(got, marker) || !strings.HasPrefix(path, strings.TrimSuffix(got, marker)) {
			t.Errorf("%s: a path of %d bytes logged as %d bytes ending %q; want at most 2048, ending %q", c.msg, len(path), len(got), got[max(0, len(got)-60):], marker)
		}
		if len(line) > 4096 {
			t.Errorf("%s: a line of %d bytes for a %d-byte path", c.msg, len(line), len(path))
		}
	}
}
