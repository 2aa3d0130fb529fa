package edge

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestManagementPanicIs500: a panic in a management route (the control
// API, /metrics, the dashboard) answers that request 500 problem+json,
// naming no internal state, closes its connection, and is logged as an
// error with its stack at the default level: net/http's own recovery
// would cut the connection with no answer and log the panic only at
// debug, where an operator at log.level info never sees it. A panic that
// comes after the answer began cuts the response instead, logged the
// same; http.ErrAbortHandler is a deliberate abort, cut quietly. The
// listener goes on serving.
func TestManagementPanicIs500(t *testing.T) {
	var logs testutil.SyncBuffer
	mgmt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/boom":
			w.Header().Set("X-Leak", "yes")
			panic("secret internal state 10.1.2.3")
		case "/late":
			_, _ = io.WriteString(w, "begun")
			w.(http.Flusher).Flush()
			panic("late secret")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "mgmt "+r.URL.Path)
	})
	e := start(t, Options{Management: mgmt, Cluster: "c1",
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	hc := &http.Client{Timeout: 5 * time.Second}

	resp, err := hc.Get("http://" + e.mgmt + "/boom")
	if err != nil {
		t.Fatalf("/boom: no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(body, &p) != nil || p.Status != 500 {
		t.Fatalf("/boom: %d %q %s, want a 500 problem", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if strings.Contains(string(body), "secret") || resp.Header.Get("X-Leak") != "" {
		t.Errorf("/boom leaked: %v %s", resp.Header, body)
	}
	if !resp.Close {
		t.Error("/boom: the connection is kept after a panic")
	}
	if resp.Header.Get("X-Gatehouse-Cluster") != "c1" {
		t.Errorf("/boom: X-Gatehouse-Cluster %q", resp.Header.Get("X-Gatehouse-Cluster"))
	}

	if resp, err := hc.Get("http://" + e.mgmt + "/late"); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Error("/late: the response begun before the panic ended as if whole")
		}
	}
	if resp, err := hc.Get("http://" + e.mgmt + "/abort"); err == nil {
		resp.Body.Close()
		t.Errorf("/abort: answered %d, want the connection cut", resp.StatusCode)
	}

	logged := func(s string) bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, s) && strings.Contains(l, "goroutine") {
				return true
			}
		}
		return false
	}
	if !testutil.Eventually(5*time.Second, func() bool { return logged("secret internal state") && logged("late secret") }) {
		t.Fatalf("panics not logged as errors with their stack:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "ErrAbortHandler") || strings.Contains(logs.String(), "abort Handler") {
		t.Errorf("a deliberate abort was logged:\n%s", logs.String())
	}
	if code, b := readyz(t, e.mgmt); code != http.StatusOK || b.Status != "ready" {
		t.Fatalf("after the panics /readyz: %d %+v", code, b)
	}
}
