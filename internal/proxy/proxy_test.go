package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

func hosts(ids ...string) []*route.Host {
	var out []*route.Host
	for _, id := range ids {
		out = append(out, &route.Host{ID: id, State: route.HostVerified, URL: &url.URL{Scheme: "http", Host: id}, Health: new(route.Health)})
	}
	return out
}

func TestRoundRobinPolicy(t *testing.T) {
	now := time.Unix(1000, 0)
	pool := hosts("a", "b", "c")
	var got []string
	for i := range uint32(6) {
		got = append(got, pick(pool, i, now, nil).ID)
	}
	if strings.Join(got, "") != "abcabc" {
		t.Fatalf("round robin %v", got)
	}
	pool[1].Health.Fail(now) // b cools down
	got = got[:0]
	for i := range uint32(6) {
		got = append(got, pick(pool, i, now, nil).ID)
	}
	if strings.Join(got, "") != "accacc" { // b's turn falls to the next one
		t.Fatalf("skipping degraded b: %v", got)
	}
	if h := pick(pool, 0, now, pool[:1]); h.ID != "c" {
		t.Fatalf("skip a from 0 = %s", h.ID)
	}
}

func TestPickAllDegradedTakesLeastRecentlyFailed(t *testing.T) {
	now := time.Unix(1000, 0)
	pool := hosts("a", "b", "c")
	pool[0].Health.Fail(now.Add(-500 * time.Millisecond))
	pool[1].Health.Fail(now.Add(-700 * time.Millisecond)) // failed longest ago
	pool[2].Health.Fail(now.Add(-300 * time.Millisecond))
	for start := range uint32(3) {
		if h := pick(pool, start, now, nil); h.ID != "b" {
			t.Fatalf("start %d picked %s, want b", start, h.ID)
		}
	}
	if h := pick(pool, 0, now, pool[1:2]); h.ID != "a" {
		t.Fatalf("with b skipped picked %s, want a", h.ID)
	}
}

func TestPickEdgeCases(t *testing.T) {
	now := time.Unix(1000, 0)
	if pick(nil, 0, now, nil) != nil {
		t.Fatal("empty pool")
	}
	tlsOnly := hosts("t")
	tlsOnly[0].URL = nil // a passthrough host cannot take HTTP
	if pick(tlsOnly, 0, now, nil) != nil {
		t.Fatal("picked a host without URL")
	}
	one := hosts("a")
	if pick(one, 0, now, one) != nil {
		t.Fatal("picked the skipped only host")
	}
	draining := hosts("d", "e")
	draining[0].State = route.HostDraining
	for i := range uint32(4) {
		if h := pick(draining, i, now, nil); h.ID != "e" {
			t.Fatalf("picked draining host")
		}
	}
}

func TestRobinsPerApp(t *testing.T) {
	var r robins
	// Two apps taking turns must each still rotate.
	var a, b []uint32
	for range 4 {
		a = append(a, r.next("a"))
		b = append(b, r.next("b"))
	}
	if fmt.Sprint(a) != "[0 1 2 3]" || fmt.Sprint(b) != "[0 1 2 3]" {
		t.Fatalf("a %v b %v", a, b)
	}
}

func TestStatusFor(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	read := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	// A connect that timed out: which of the dialer's two clocks fires
	// first decides whether its error is also context.DeadlineExceeded.
	// Either way the host could not be reached: 502, not 504.
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	_, dialTimeout := (&net.Dialer{}).DialContext(expired, "tcp", "127.0.0.1:1")
	if !errors.Is(dialTimeout, context.DeadlineExceeded) || !isDial(dialTimeout) {
		t.Fatalf("a dial past its deadline failed with %v", dialTimeout)
	}
	tests := []struct {
		err    error
		status int
		reason string
	}{
		{context.Canceled, 499, "canceled"},
		{fmt.Errorf("wrapped: %w", context.Canceled), 499, "canceled"},
		{context.DeadlineExceeded, 504, "timeout"},
		{dial, 502, "dial"},
		{fmt.Errorf("%w: %w", ErrUnreachable, dial), 502, "dial"},
		{dialTimeout, 502, "dial"},
		{fmt.Errorf("%w: %w", ErrUnreachable, dialTimeout), 502, "dial"},
		{timeoutErr{}, 504, "timeout"},
		{&url.Error{Op: "Get", URL: "x", Err: timeoutErr{}}, 504, "timeout"},
		{read, 502, "other"},
		{io.ErrUnexpectedEOF, 502, "other"},
		{ErrNoHost, 503, "no_host"},
		{ErrNoRoutableHost, 502, "no_host"},
		{errNotApp, 500, "other"},
		{fmt.Errorf("%w: %w", errBadBody, io.ErrUnexpectedEOF), 400, "bad_body"},
	}
	for _, tt := range tests {
		if got := statusFor(tt.err); got != tt.status {
			t.Errorf("statusFor(%v) = %d, want %d", tt.err, got, tt.status)
		}
		if got := reasonFor(tt.err); got != tt.reason {
			t.Errorf("reasonFor(%v) = %s, want %s", tt.err, got, tt.reason)
		}
		if d := detailFor(statusFor(tt.err), tt.err); strings.Contains(d, "127.0.0.1") || d == "" {
			t.Errorf("detail %q", d)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "timeout awaiting response headers" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestOptions(t *testing.T) {
	for _, o := range []Options{{DialTimeout: -1}, {IdleConnTimeout: -1}, {MaxIdleConnsPerHost: -1}} {
		if _, err := New(o); err == nil || !strings.HasPrefix(err.Error(), "proxy: ") {
			t.Errorf("New(%+v) = %v", o, err)
		}
	}
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.opts.DialTimeout != 5*time.Second || p.opts.MaxIdleConnsPerHost != 64 || p.opts.ResponseHeaderTimeout != 30*time.Second {
		t.Fatalf("defaults %+v", p.opts)
	}
	if err := errors.Join(p.Close(), p.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestNotRouted: the proxy outside the gateway chain answers 500, never
// panics.
func TestNotRouted(t *testing.T) {
	p, err := New(Options{ClusterID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest("GET", "http://x/", nil))
	if w.Code != http.StatusInternalServerError || w.Header().Get("X-Gatehouse-Cluster") != "c1" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
}

func TestIsConnBroken(t *testing.T) {
	yes := []error{
		&net.OpError{Op: "read", Err: syscall.ECONNRESET},
		fmt.Errorf("x: %w", io.ErrUnexpectedEOF),
		io.EOF,
	}
	no := []error{errors.New(`client tried to switch to invalid protocol "x"`), context.Canceled}
	for _, err := range yes {
		if !isConnBroken(err) {
			t.Errorf("%v should count against the host", err)
		}
	}
	for _, err := range no {
		if isConnBroken(err) {
			t.Errorf("%v should not count against the host", err)
		}
	}
}
