package edge

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDrainKeepsInFlight: a slow request and a passthrough pipe are in
// flight when drain starts. /readyz turns 503, new connections are
// refused, the pipe keeps flowing, the request completes with 200, and Run
// returns once both are done.
func TestDrainKeepsInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "active_connections"})
	e := start(t, Options{Handler: slow, DrainTimeout: 20 * time.Second, ActiveConns: gauge,
		Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil)})

	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	go func() {
		resp, err := (&http.Client{Transport: tr}).Get("https://" + e.https + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b), err}
	}()
	pipeConn, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer pipeConn.Close()
	roundTrip := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(pipeConn, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		_ = pipeConn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(pipeConn, buf); err != nil || string(buf) != msg {
			t.Fatalf("pipe echo %q: %v", buf, err)
		}
	}
	roundTrip("before drain")
	<-entered
	if code, b := readyz(t, e.mgmt); code != 200 || b.ActiveConnections != 2 {
		t.Fatalf("readyz before drain: %d %+v", code, b)
	}
	if v := promtest.ToFloat64(gauge); v != 2 {
		t.Fatalf("active_connections gauge %v, want 2", v)
	}

	e.cancel() // drain starts
	testutil.WaitFor(t, 5*time.Second, func() bool {
		code, b := readyz(t, e.mgmt)
		return code == 503 && b.Status == "draining" && b.ActiveConnections == 2
	}, "readyz did not turn 503 draining")
	for _, addr := range []string{e.https, e.http} {
		testutil.WaitFor(t, 5*time.Second, func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err != nil
		}, "new connections still accepted during drain on "+addr)
	}
	roundTrip("during drain")
	select {
	case r := <-res:
		t.Fatalf("request ended before release: %+v", r)
	default:
	}
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "done" {
		t.Fatalf("in-flight request cut by drain: %+v", r)
	}
	select {
	case err := <-e.done:
		t.Fatalf("Run returned with a pipe still open: %v", err)
	default:
	}
	pipeConn.Close()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		e.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the last connection closed")
	}
	if v := promtest.ToFloat64(gauge); v != 0 {
		t.Fatalf("gauge %v after drain", v)
	}
}

// TestDrainTimeoutCuts: a request that outlives DrainTimeout is cut and
// Run returns.
func TestDrainTimeoutCuts(t *testing.T) {
	entered, testDone := make(chan struct{}), make(chan struct{})
	defer close(testDone)
	stuck := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
		case <-testDone:
		}
	})
	var logs testutil.SyncBuffer
	e := start(t, Options{HTTPMode: ModeServe, Handler: stuck, DrainTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	errc := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + e.http + "/stuck")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	start := time.Now()
	if err := e.stop(t); err != nil {
		t.Fatal(err)
	}
	e.done <- nil
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("drain took %v with a 200ms timeout", d)
	}
	if err := <-errc; err == nil {
		t.Fatal("stuck request was not cut")
	}
	if n := e.ActiveConnections(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
	// The cut request's 499 is the gateway's doing, and the log says so.
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "cut_connections=1") {
		t.Fatalf("the drain's cut is not a warning naming the count:\n%s", logs.String())
	}
}

// TestDrainTimeoutCutsAHello: a client still sending its ClientHello when
// DrainTimeout runs out is cut with the rest, as a request would be: the
// hello's own bound (ReadHeaderTimeout, 10 s by default) may be longer
// than the drain's, and must not hold the drain, and the process's exit,
// past it.
func TestDrainTimeoutCutsAHello(t *testing.T) {
	const drain, hello = 200 * time.Millisecond, 10 * time.Second
	e := start(t, Options{DrainTimeout: drain, ReadHeaderTimeout: hello})
	c, err := net.Dial("tcp", e.https)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{22, 3, 1}); err != nil { // a record header, cut short
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 1 }, "the client is not counted")
	start := time.Now()
	if err := e.stop(t); err != nil {
		t.Fatal(err)
	}
	e.done <- nil // for the cleanup
	if d := time.Since(start); d > drain+2*time.Second {
		t.Fatalf("drain took %v with a %v drain timeout: a hello in flight held it", d, drain)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the client sending its hello was not closed: %v", err)
	}
	if n := e.ActiveConnections(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
}
