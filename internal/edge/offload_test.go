package edge

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestHTTP2HandlersOnReusedGoroutines: HTTP/2 requests are answered by
// the handler run on the offload pool, which one goroutine serves when
// they come one after another; a handler's panic reaches net/http as
// before (http.ErrAbortHandler and any other: the stream is reset, the
// client sees an error) and the connection and server go on.
func TestHTTP2HandlersOnReusedGoroutines(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abort":
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "partial")
			panic(http.ErrAbortHandler)
		case "/boom":
			panic("boom")
		case "/late":
			_, _ = io.WriteString(w, "begun")
			w.(http.Flusher).Flush()
			panic("late")
		}
		_, _ = io.WriteString(w, "ok "+r.Proto)
	})
	var logs testutil.SyncBuffer
	e := start(t, Options{Handler: h, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(path string) (string, error) {
		resp, err := hc.Get("https://" + e.https + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	const n = 20
	for i := range n {
		body, err := get("/x")
		if err != nil || body != "ok HTTP/2.0" {
			t.Fatalf("request %d: %q, %v", i, body, err)
		}
		// The stream's end can reach the client before the handler's
		// goroutine is back waiting: let it be, as a pause between
		// requests would (up to 1 s on a busy machine).
		testutil.Eventually(time.Second, func() bool { return e.offload.pool.Idle() > 0 })
	}
	if got := e.offload.pool.Started(); got > 5 {
		t.Fatalf("%d goroutines started for %d requests one after another: not reused", got, n)
	}
	for _, path := range []string{"/abort", "/boom", "/late"} {
		if body, err := get(path); err == nil {
			t.Fatalf("%s: answered %q without an error: the panic did not reach net/http", path, body)
		}
		if body, err := get("/x"); err != nil || body != "ok HTTP/2.0" {
			t.Fatalf("after %s: %q, %v", path, body, err)
		}
	}
	// net/http logs the panic with the stack of its own, waiting goroutine;
	// the handler's is in the text. HTTP/2 resets the stream before it
	// logs, so the client can see its error before the log is written.
	carried := func(l string) bool {
		return strings.Contains(l, "handler goroutine (offloaded)") && strings.Contains(l, "TestHTTP2HandlersOnReusedGoroutines.func1")
	}
	if !testutil.Eventually(5*time.Second, func() bool { return carried(logs.String()) }) {
		t.Fatalf("the panic's log does not carry the handler's stack:\n%s", logs.String())
	}
}
