package gatehouse

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDrainCutLogsWhatWasSent: when drain_timeout cuts the connections
// still open, a request whose answer had not begun logs 499, and a stream
// cut mid-answer (here Server-Sent Events, the usual long-lived request)
// logs the status it sent, 200, with the bytes that went out, as nginx
// logs one. The drain's warning, which an operator reads to find the cut
// requests, says both: it said they all log 499, and the cut streams were
// not among the 499s.
func TestDrainCutLogsWhatWasSent(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	cfg := testConfig(t)
	cfg.DrainTimeout = time.Second
	logs := new(testutil.SyncBuffer)
	g, err := New(cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("gateway stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready after 30s")
	}
	r := &running{g: g, cancel: cancel, done: done}
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	atWait := make(chan struct{}, 1)
	startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/wait" {
			select {
			case atWait <- struct{}{}:
			default:
			}
			<-req.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-req.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(g.Live().Load().Pool("hello")) == 1 }, "host not routable")

	for _, path := range []string{"/events", "/wait"} {
		c, err := net.DialTimeout("tcp", g.Addrs().HTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: hello.test.local\r\n\r\n")
		if path == "/events" {
			br := bufio.NewReader(c)
			if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
				t.Fatalf("%s: %v %v", path, res, err)
			}
			go func() { _, _ = io.Copy(io.Discard, br) }()
		}
	}
	// /events answered, so it is at the host; /wait sends no answer, so
	// wait for the host to have it: a drain begun before the edge read it
	// cut a request nobody had seen, and no line said 499.
	select {
	case <-atWait:
	case <-time.After(10 * time.Second):
		t.Fatal("/wait did not reach the host")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil

	var warning string
	var began map[string]any // the drain's first line
	status := map[string]float64{}
	bytes := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		msg, _ := m["msg"].(string)
		switch {
		case msg == "request":
			p, _ := m["path"].(string)
			status[p], _ = m["status"].(float64)
			bytes[p], _ = m["bytes"].(float64)
		case strings.HasPrefix(msg, "edge: drained; drain_timeout cut the connections still open"):
			warning = msg
		case strings.HasPrefix(msg, "edge: draining:"):
			if warning != "" {
				t.Errorf("the drain's first line came after its last")
			}
			began = m
		}
	}
	// An operator who sent SIGTERM reads at once that the drain began,
	// how long it may take and what it waits for; before, nothing came
	// until it ended.
	if began == nil || began["drain_timeout"] != float64(cfg.DrainTimeout) || began["open_connections"] != float64(2) {
		t.Errorf("the drain's first line: %v; want drain_timeout %v and 2 open connections", began, cfg.DrainTimeout)
	}
	if status["/wait"] != 499 {
		t.Errorf("a request cut before its answer logged %v, want 499", status["/wait"])
	}
	if status["/events"] != 200 || bytes["/events"] == 0 {
		t.Errorf("a stream cut mid-answer logged status %v, %v bytes; want 200 and what went out", status["/events"], bytes["/events"])
	}
	if !strings.Contains(warning, "499") || !strings.Contains(warning, "the status it sent") {
		t.Errorf("the drain's warning %q does not say what the cut requests log (499 before an answer, the status it sent after)", warning)
	}
}
