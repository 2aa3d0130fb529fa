package edge

import (
	"crypto/tls"
	"fmt"
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
	// gatehouse's HTTP/2 server runs handlers on its pool itself; with
	// the fast path off, net/http's runs them through offload.
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "h2", false: "net/http"}[own], func(t *testing.T) { reusedGoroutines(t, h, own) })
	}
}

func reusedGoroutines(t *testing.T, h http.Handler, own bool) {
	var logs testutil.SyncBuffer
	e := start(t, Options{Handler: h, DisableLane: !own, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	started, idle := e.offload.pool.Started, e.offload.pool.Idle
	if own {
		started, idle = e.h2.Started, e.h2.IdleHandlers
	}
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
		testutil.Eventually(time.Second, func() bool { return idle() > 0 })
	}
	if got := started(); got > 5 {
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
		if own { // logged where it happened
			return strings.Contains(l, "h2: panic serving request") && strings.Contains(l, "TestHTTP2HandlersOnReusedGoroutines.func1")
		}
		return strings.Contains(l, "handler goroutine (offloaded)") && strings.Contains(l, "TestHTTP2HandlersOnReusedGoroutines.func1")
	}
	if !testutil.Eventually(5*time.Second, func() bool { return carried(logs.String()) }) {
		t.Fatalf("the panic's log does not carry the handler's stack:\n%s", logs.String())
	}
}

// TestHTTP2WriteAfterReturnFails: a handler that leaves its HTTP/2
// ResponseWriter to a goroutine that writes after it returned gets an
// error from every write, flush and ResponseController call then, never
// a panic, and never a byte into the stream of the request served next
// (whose handler may be given the same pooled task).
func TestHTTP2WriteAfterReturnFails(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "h2", false: "net/http"}[own], func(t *testing.T) { writeAfterReturn(t, own) })
	}
}

func writeAfterReturn(t *testing.T, own bool) {
	kept := make(chan http.ResponseWriter, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/keep":
			_, _ = io.WriteString(w, "first")
			kept <- w
		case "/next":
			close(entered)
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			_, _ = io.WriteString(w, "second")
		}
	})
	e := start(t, Options{Handler: h, DisableLane: !own})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(path string) (string, error) {
		resp, err := hc.Get("https://" + e.https + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			return "", fmt.Errorf("answered over %s", resp.Proto)
		}
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// stray writes to w as a goroutine left behind would, and says what
	// went through: a panic is a failure too.
	stray := func(w http.ResponseWriter) (errs []error, panicked any) {
		defer func() { panicked = recover() }()
		w.Header().Set("X-Stray", "1")
		w.WriteHeader(http.StatusTeapot)
		_, err := w.Write([]byte("STRAY"))
		errs = append(errs, err)
		rc := http.NewResponseController(w)
		errs = append(errs, rc.Flush(), rc.SetWriteDeadline(time.Now().Add(time.Second)))
		return errs, nil
	}
	check := func(when string, w http.ResponseWriter) {
		t.Helper()
		errs, p := stray(w)
		if p != nil {
			t.Fatalf("%s: a write after the handler returned panicked: %v", when, p)
		}
		for i, err := range errs {
			if err == nil {
				t.Fatalf("%s: call %d after the handler returned succeeded", when, i)
			}
		}
	}

	if body, err := get("/keep"); err != nil || body != "first" {
		t.Fatalf("/keep: %q, %v", body, err)
	}
	var w http.ResponseWriter
	select {
	case w = <-kept:
	case <-time.After(5 * time.Second):
		t.Fatal("no writer kept")
	}
	// The client has the whole answer: the handler has returned.
	check("after /keep", w)

	next := make(chan string, 1)
	go func() {
		body, err := get("/next")
		if err != nil {
			body = err.Error()
		}
		next <- body
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("/next did not start")
	}
	check("while /next runs", w)
	close(release)
	select {
	case body := <-next:
		if body != "second" {
			t.Fatalf("/next answered %q, want only its own handler's %q", body, "second")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("/next did not finish")
	}
}
