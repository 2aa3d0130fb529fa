package edge

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/summerwind/h2spec/config"
	"github.com/summerwind/h2spec/generic"
	"github.com/summerwind/h2spec/hpack"
	"github.com/summerwind/h2spec/http2"
	"github.com/summerwind/h2spec/spec"
)

// h2specKnown lists, per implementation, the h2spec cases (by their id,
// as the h2spec command's -j report and its section filter name them)
// that fail against it, each with why. Anything else that fails fails
// the test, and so does a listed case that passes: the list must shrink
// when the server gets better.
var h2specKnown = map[string]map[string]string{
	"net/http": {
		// h2spec sends a 20,000-byte HEADERS frame, over the 16,384 default,
		// without reading the server's SETTINGS; net/http advertises
		// SETTINGS_MAX_FRAME_SIZE 1 MiB (http2.Server.MaxReadFrameSize), so
		// the frame is legal (RFC 9113 §4.2) and it answers the request.
		// h2spec's case is wrong for this server, not the server.
		"http2/4.2/3": "the frame is within the advertised 1 MiB SETTINGS_MAX_FRAME_SIZE",
		// net/http closes the connection with PROTOCOL_ERROR on a SETTINGS
		// frame that repeats a parameter ("settings_big_or_dups": "this
		// isn't actually in the spec, but hang up on them anyway").
		// RFC 9113 §6.5.3 says the values are processed in order, so two
		// INITIAL_WINDOW_SIZE values are legal and the last one wins.
		"http2/6.5.3/1": "duplicate SETTINGS parameter is a connection error in net/http",
		// A request with a connection-specific field (RFC 9113 §8.2.2) or
		// a TE other than "trailers" is malformed; net/http does not call
		// the handler but answers 400 and ends the stream (HEADERS+DATA
		// with END_STREAM) instead of RST_STREAM PROTOCOL_ERROR. §8.1.1
		// allows it ("a server MAY send an HTTP response prior to closing
		// or resetting the stream"); h2spec wants the reset.
		"http2/8.1.2.2/1": "connection-specific field: 400 and END_STREAM, not RST_STREAM",
		"http2/8.1.2.2/2": "TE other than trailers: 400 and END_STREAM, not RST_STREAM",
	},
}

// TestH2Spec runs h2spec, the standard HTTP/2 conformance suite (generic,
// http2 and hpack sections, strict cases included), against the https
// listener of each implementation, with an application that answers like
// a normal one: it reads the request body and answers 200 with a body.
//
// h2spec is used as a library, case by case, rather than through
// h2spec.Run: Run prints to stdout and exits the process when it cannot
// connect. Cases run a few at a time, each on its own connection, with
// h2spec's timeout (how long a case waits for a frame it expects) at 2 s.
func TestH2Spec(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, strings.Repeat("h2spec ", 100))
		})
		e := impl.start(t, Options{Handler: h})
		host, port, _ := net.SplitHostPort(e.https)
		p, _ := strconv.Atoi(port)
		cases := h2specCases()
		cfg := func() *config.Config {
			return &config.Config{
				Host: host, Port: p, Path: "/", Timeout: 2 * time.Second,
				MaxHeaderLen: 4000, TLS: true, Insecure: true, Strict: true,
			}
		}
		failed := runH2Spec(t, cases, cfg)
		known := h2specKnown[impl.name]
		for _, c := range cases {
			// Under -race on a loaded machine a case can miss its 2 s
			// wait: one that fails and is not known runs once more, on
			// its own. A real failure fails again.
			if _, isFailed := failed[c.id]; isFailed && known[c.id] == "" {
				if err := runH2SpecCase(c.tc, cfg()); err == nil || err == spec.ErrSkipped {
					t.Logf("h2spec %s failed once (%v), then passed on its own", c.id, failed[c.id])
					delete(failed, c.id)
				}
			}
			why, isKnown := known[c.id]
			err, isFailed := failed[c.id]
			switch {
			case isFailed && !isKnown:
				t.Errorf("h2spec %s %s\n\t-> %s\n\t%v", c.id, c.tc.Desc, c.tc.Requirement, err)
			case !isFailed && isKnown:
				t.Errorf("h2spec %s %s: passes now; remove it from h2specKnown (%s)", c.id, c.tc.Desc, why)
			}
		}
		for id := range known {
			if !slices.ContainsFunc(cases, func(c h2specCase) bool { return c.id == id }) {
				t.Errorf("h2specKnown lists %s, which h2spec has no case for", id)
			}
		}
		t.Logf("h2spec: %d cases, %d failed (%d known)", len(cases), len(failed), len(known))
	})
}

// h2specCase is one h2spec test case and its id: section path and
// sequence number, as "http2/6.5.3/2".
type h2specCase struct {
	id string
	tc *spec.TestCase
}

// h2specCases walks h2spec's three sections, strict cases included.
func h2specCases() []h2specCase {
	var out []h2specCase
	var walk func(g *spec.TestGroup)
	walk = func(g *spec.TestGroup) {
		for i, tc := range append(slices.Clone(g.Tests), g.StrictTests...) {
			out = append(out, h2specCase{id: fmt.Sprintf("%s/%d", g.ID(), i+1), tc: tc})
		}
		for _, sub := range g.Groups {
			walk(sub)
		}
	}
	for _, g := range []*spec.TestGroup{generic.Spec(), http2.Spec(), hpack.Spec()} {
		walk(g)
	}
	return out
}

// runH2Spec runs cases, a few at a time, and returns the failed ones'
// errors by id. A case h2spec skips (the server's settings make it moot)
// is not a failure.
func runH2Spec(t *testing.T, cases []h2specCase, cfg func() *config.Config) map[string]error {
	t.Helper()
	var (
		mu     sync.Mutex
		failed = map[string]error{}
		wg     sync.WaitGroup
		sem    = make(chan struct{}, 8)
	)
	for _, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := runH2SpecCase(c.tc, cfg())
			if err != nil && err != spec.ErrSkipped {
				mu.Lock()
				failed[c.id] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// runH2SpecCase runs one case on its own connection. h2spec bounds its
// reads by the config's timeout but not its writes, so a case still
// running after h2specCaseWait has its connection closed under it, which
// ends any read or write it waits on.
//
// Only the case's waits for a frame keep the config's timeout (h2spec
// sets it as a read deadline: frameWaitConn). Its dial and handshake get
// longer than h2specCaseWait: h2spec's handshake (Conn.handshakeAsClient)
// that gives up leaves its reader goroutine blocked for good on an
// unbuffered send nobody receives, which the package's leak check then
// finds; under -race at load 20-30, handshakes outlasting 2 s leaked
// some. Given longer, the handshake never gives up first: closing the
// connection ends its read, and its wait receives the error. A few cases
// first measure the server's answer on a connection of their own
// (spec.ServerDataLength): no check, so it gets the long timeout
// throughout.
func runH2SpecCase(tc *spec.TestCase, c *config.Config) error {
	long := *c
	long.Timeout = 2 * h2specCaseWait
	conn, err := spec.Dial(&long)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	conn.Conn = frameWaitConn{Conn: conn.Conn, wait: c.Timeout}
	res := make(chan error, 1)
	go func() { res <- tc.Run(&long, conn) }()
	select {
	case err := <-res:
		return err
	case <-time.After(h2specCaseWait):
		conn.Close()
		return fmt.Errorf("still running after %v: %v", h2specCaseWait, <-res)
	}
}

const h2specCaseWait = 20 * time.Second

// frameWaitConn is a case's connection whose read deadlines are wait from
// now, whatever h2spec asks: its Conn.WaitEvent, the one wait for a frame,
// asks for now plus Conn.Timeout, which runH2SpecCase lengthens for the
// dial and the handshake.
type frameWaitConn struct {
	net.Conn
	wait time.Duration
}

func (c frameWaitConn) SetReadDeadline(time.Time) error {
	return c.Conn.SetReadDeadline(time.Now().Add(c.wait))
}
