package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// outcome is how one client request ended.
type outcome int

const (
	okay outcome = iota // 200 with an upstream's label as the body
	// refused: the connection for the request could not be opened after
	// the signal (the listener was gone); the request was never sent.
	refused
	// lateReset: a connection dialled after the signal was reset before
	// any answer: the kernel had queued it when the listener closed, so
	// the gateway never accepted it or read the request. Like refused, a
	// NEW request after the signal, counted apart.
	lateReset
	// failed: anything else (a reset, EOF or timeout on a connection the
	// gateway had accepted, a non-200 status, a broken body). Never
	// allowed.
	failed
)

// result is one request's start time and outcome.
type result struct {
	start   time.Time
	label   string // the serving upstream, for okay
	outcome outcome
	detail  string // for failed
}

// load drives keep-alive GETs through the gateway from a few workers,
// each bounded in count and time, until stopped.
type load struct {
	s         *system
	client    *http.Client
	signalled atomic.Int64 // UnixNano of the signal under test; 0 before it
	okCount   atomic.Int64
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	results []result
}

// startLoad starts workers goroutines sending at most perWorker requests
// each, for at most maxDur. A worker stops early at its first refused or
// lateReset request (the listener is gone).
func startLoad(t *testing.T, s *system, workers, perWorker int, maxDur time.Duration) *load {
	l := &load{s: s, client: newClient(workers), stop: make(chan struct{})}
	deadline := time.Now().Add(maxDur)
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < perWorker && time.Now().Before(deadline); i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				r := l.one(fmt.Sprintf("/load?w=%d&i=%d", w, i))
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
				if r.outcome == okay {
					l.okCount.Add(1)
				}
				if r.outcome == refused || r.outcome == lateReset {
					return
				}
			}
		}()
	}
	t.Cleanup(l.finish)
	return l
}

// finish stops the workers and waits for them; idempotent.
func (l *load) finish() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

// markSignal records that the signal under test is being sent now.
func (l *load) markSignal() { l.signalled.Store(time.Now().UnixNano()) }

// one sends one request and classifies how it ended.
func (l *load) one(path string) result {
	var dialStart atomic.Int64
	var reused atomic.Bool
	trace := &httptrace.ClientTrace{
		ConnectStart: func(string, string) { dialStart.Store(time.Now().UnixNano()) },
		GotConn:      func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
	}
	r := result{start: time.Now()}
	req := l.s.appRequest(httptrace.WithClientTrace(context.Background(), trace), path)
	resp, err := l.client.Do(req)
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case rerr != nil:
			r.outcome, r.detail = failed, fmt.Sprintf("%s: body: %v", path, rerr)
		case resp.StatusCode != http.StatusOK:
			r.outcome, r.detail = failed, fmt.Sprintf("%s: status %d: %.200s", path, resp.StatusCode, b)
		default:
			r.label = string(b)
		}
		return r
	}
	sig := l.signalled.Load()
	switch {
	case sig != 0 && isDialError(err):
		r.outcome = refused
	case sig != 0 && dialStart.Load() >= sig && !reused.Load() &&
		(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)):
		r.outcome = lateReset
	default:
		r.outcome, r.detail = failed, fmt.Sprintf("%s: %v (reused conn %v)", path, err, reused.Load())
	}
	return r
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// summary counts a set of results.
type summary struct {
	sent, ok, refused, lateReset, failed int
	byLabel                              map[string]int
	failures                             []string // the first few
}

func summarize(rs []result) summary {
	s := summary{sent: len(rs), byLabel: map[string]int{}}
	for _, r := range rs {
		switch r.outcome {
		case okay:
			s.ok++
			s.byLabel[r.label]++
		case refused:
			s.refused++
		case lateReset:
			s.lateReset++
		case failed:
			s.failed++
			if len(s.failures) < 10 {
				s.failures = append(s.failures, r.detail)
			}
		}
	}
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("sent %d: ok %d (by upstream %v), failed %d, refused after signal %d, new-connection reset after signal %d",
		s.sent, s.ok, s.byLabel, s.failed, s.refused, s.lateReset)
}

// resultsSince returns the results of requests started at or after t.
func (l *load) resultsSince(t time.Time) []result {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []result
	for _, r := range l.results {
		if !r.start.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

func (l *load) all() []result { return l.resultsSince(time.Time{}) }

// slowRequests sends n GET /slow?ms=ms through the gateway at once, each
// on its own connection, and delivers their results on the channel.
func slowRequests(s *system, n, ms int) <-chan result {
	out := make(chan result, n)
	for range n {
		go func() {
			c := newClient(1)
			defer c.CloseIdleConnections()
			r := result{start: time.Now()}
			resp, err := c.Do(s.appRequest(context.Background(), fmt.Sprintf("/slow?ms=%d", ms)))
			if err != nil {
				r.outcome, r.detail = failed, "slow: "+err.Error()
				out <- r
				return
			}
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case rerr != nil:
				r.outcome, r.detail = failed, "slow: body: "+rerr.Error()
			case resp.StatusCode != http.StatusOK:
				r.outcome, r.detail = failed, fmt.Sprintf("slow: status %d: %.200s", resp.StatusCode, b)
			default:
				r.label = string(b)
			}
			out <- r
		}()
	}
	return out
}

// collect reads n results from ch within timeout.
func collect(t *testing.T, ch <-chan result, n int, timeout time.Duration) []result {
	t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	var rs []result
	for len(rs) < n {
		select {
		case r := <-ch:
			rs = append(rs, r)
		case <-tm.C:
			t.Fatalf("only %d of %d slow requests finished within %s", len(rs), n, timeout)
		}
	}
	return rs
}
