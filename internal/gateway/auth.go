package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// auth is step 7. For an app with auth.required it takes the token from
// Authorization: Bearer only (one in the query string is refused, 401),
// verifies it (internal/auth: 401 when missing or invalid, 403 when its
// aud does not cover the app), and records its subject, issuer and scopes
// for dispatch to send as X-Gatehouse-Subject/Issuer/Scopes: two issuers
// may each have an "alice", and only the pair names one user. The token
// itself goes on verbatim.
//
// With claim limits on, the token's limits apply per subject, that is per
// (iss, sub) pair, since a sub is unique only within its issuer: over rps or
// connections is 429; read_Bps slows the request body and write_Bps the
// response to their rate (backpressure, never a cut), and both the two
// directions of a connection upgraded to another protocol. A Server-Sent Events
// response whose token expires ends with an "auth-expired" event.
func (g *Gateway) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		if rq == nil || rq.Match.Kind != route.KindApp || !rq.Match.App.Auth.Required {
			next.ServeHTTP(w, r)
			return
		}
		c, err := g.verify(r, rq.Match.App.ID)
		if err != nil {
			authError(w, err)
			return
		}
		rq.Subject, rq.Issuer, rq.Scopes = c.Subject, c.Issuer, c.Scope
		if g.edge.claims && c.Limits != nil {
			who := limit.Subject{Issuer: c.Issuer, Sub: c.Subject}
			cl := claimLimits(c.Limits)
			grant, err := g.edge.subjects.Admit(who, cl)
			if err != nil {
				g.claimRefused(w, exchangeFrom(r.Context()), rq.Match.App.ID, cl, err)
				return
			}
			defer grant.Release()
			if grant.Read != nil && r.Body != nil && r.Body != http.NoBody {
				r.Body = limit.NewReader(r.Context(), r.Body, grant.Read)
			}
			if grant.Write != nil {
				w = limit.NewWriter(r.Context(), w, grant.Write)
			}
			if grant.Read != nil || grant.Write != nil {
				// A protocol switch (WebSocket) hijacks the connection
				// past the body and writer above: it gets the rates too.
				w = limit.NewHijacker(r.Context(), w, grant.Read, grant.Write)
			}
		}
		if c.ExpiresAt == nil { // cannot happen: exp is required
			next.ServeHTTP(w, r)
			return
		}
		// The token is good until exp plus the leeway Verify allowed: a
		// stream admitted inside the leeway would otherwise end at once.
		g.serveUntilExpiry(next, w, r, c.ExpiresAt.Time.Add(g.edge.verifier.Leeway()))
	})
}

func (g *Gateway) verify(r *http.Request, app string) (*auth.Claims, error) {
	tok, err := auth.BearerToken(r)
	if err != nil {
		return nil, err
	}
	return g.edge.verifier.Verify(tok, app) // a nil verifier refuses every token
}

// authError answers a verification failure, with the RFC 6750 challenge
// (auth.Challenge), whose error_description and the problem's detail say
// what was wrong: an expired token, one not valid yet, a forged one. A
// client that is told only "invalid_token" fetches a new token, which
// mends an expired one and never a token of the wrong issuer.
func authError(w http.ResponseWriter, err error) {
	status := auth.Status(err)
	detail := "a valid bearer token is required"
	switch code, desc := auth.Describe(err); {
	case status == http.StatusForbidden:
		detail = "the token does not cover this app"
	case code == auth.CodeInvalidRequest:
		detail = desc // the request is at fault, not a token
	case desc != "":
		detail += ": " + desc
	}
	w.Header().Set("WWW-Authenticate", auth.Challenge("gatehouse", err, ""))
	problem.Write(w, status, detail)
}

func claimLimits(l *auth.Limits) limit.Claims {
	return limit.Claims{RPS: int(l.RPS), Connections: int(l.Connections), ReadBps: l.ReadBps, WriteBps: l.WriteBps}
}

// claimRefused answers 429 for a subject over its rps or connections (c
// are the token's limits). Over rps, the rate-limit fields step 6 set for
// the app's window are replaced by the token's bucket (policy "rps": c.RPS
// requests a second, none left, room again after its wait): a client
// reading the app's would retry at once, and again. Unless this request
// took the app's last unit and the window has room later than the bucket:
// then the app's fields stay, and Retry-After is the window's wait, or the
// client would be refused again by the window. A connections limit is no
// budget over time, and leaves them as they are.
func (g *Gateway) claimRefused(w http.ResponseWriter, x *exchange, app string, c limit.Claims, err error) {
	var ref *limit.Refusal
	which, retry := "claims", int64(1)
	if errors.As(err, &ref) {
		which, retry = ref.Limit, max(limit.Seconds(ref.RetryAfter), 1)
	}
	if which == "rps" && c.RPS > 0 {
		if x != nil && x.appWait >= ref.RetryAfter {
			retry = max(limit.Seconds(x.appWait), 1)
		} else {
			setRateFields(w.Header(), x, which, limit.Quota{Limit: c.RPS, Window: time.Second},
				limit.Result{Limit: c.RPS, Reset: ref.RetryAfter, RetryAfter: ref.RetryAfter})
		}
	}
	g.edge.limited.WithLabelValues(app, which).Inc()
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	problem.Write(w, http.StatusTooManyRequests, "the token's "+which+" limit is exhausted")
}

// errTokenExpired cancels the request of a stream whose token expired.
var errTokenExpired = errors.New("gateway: token expired during the stream")

// authExpiredEvent ends a Server-Sent Events stream whose token expired.
const authExpiredEvent = "event: auth-expired\ndata: {\"reason\":\"the bearer token expired; reconnect with a new one\"}\n\n"

// serveUntilExpiry runs next; if the response turns out to be an event
// stream it is cut from the host when the token expires, and the client is
// told so with an auth-expired event. Other responses are not timed:
// a token is checked once, when the request starts.
func (g *Gateway) serveUntilExpiry(next http.Handler, w http.ResponseWriter, r *http.Request, exp time.Time) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	sw := &sseWatch{ResponseWriter: w, exp: exp, now: g.clock(), cancel: cancel, fired: make(chan struct{})}
	func() {
		defer func() {
			if v := recover(); v != nil {
				// A proxy whose upstream read we cancelled aborts with
				// ErrAbortHandler; that end is ours to finish below.
				if v == http.ErrAbortHandler && sw.expired.Load() {
					return
				}
				panic(v)
			}
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	}()
	sw.stop()
	if !sw.expired.Load() {
		// The host ended the stream (or the client left): what it sent
		// after its last event goes on as it came.
		if len(sw.held) > 0 {
			_, _ = w.Write(sw.held)
		}
		return
	}
	// The host's unfinished event, held back, is dropped: a client could
	// not have dispatched it, and glued to the event below it would have
	// turned auth-expired into part of the host's event. Past maxHeld it
	// was passed on: its line is ended, so that at least the event's type
	// reaches the client.
	if sw.passing && !sw.lineStart {
		_, _ = w.Write([]byte("\n"))
	}
	_, _ = w.Write([]byte(authExpiredEvent))
	_ = http.NewResponseController(w).Flush()
}

func (g *Gateway) clock() func() time.Time {
	if g.now != nil {
		return g.now
	}
	return time.Now
}

// sseWatch arms the expiry timer when the response turns out to be
// text/event-stream. The timer's func is its only goroutine; stop waits
// for it if it already started.
type sseWatch struct {
	http.ResponseWriter
	exp     time.Time
	now     func() time.Time
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	fired   chan struct{}
	expired atomic.Bool
	wrote   bool

	// An event stream's bytes after its last complete event (a blank
	// line ends one) are held back until the event is complete, up to
	// maxHeld: a client dispatches no unfinished event anyway, and on
	// expiry they are dropped, so that the auth-expired event starts on
	// a clean boundary. lineStart, lastCR and field are the scan's state
	// (see boundary) at the end of what was written; passing says an
	// event longer than maxHeld is being passed on as it comes.
	sse       bool
	held      []byte
	lineStart bool
	lastCR    bool
	field     bool
	passing   bool
}

// maxHeld bounds the unfinished event an event stream holds back.
const maxHeld = 16 << 10

func (s *sseWatch) WriteHeader(code int) {
	if !s.wrote && code >= 200 {
		s.wrote = true
		if isEventStream(s.Header().Get("Content-Type")) {
			s.sse, s.lineStart = true, true
			s.timer = time.AfterFunc(max(s.exp.Sub(s.now()), 0), s.expire)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sseWatch) expire() {
	s.expired.Store(true)
	s.cancel(errTokenExpired)
	close(s.fired)
}

// stop disarms the timer, or waits for it to finish if it fired.
func (s *sseWatch) stop() {
	if s.timer != nil && !s.timer.Stop() {
		<-s.fired
	}
}

func (s *sseWatch) Write(b []byte) (int, error) {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	if s.expired.Load() {
		return 0, errTokenExpired // the stream is over; the event follows
	}
	if !s.sse {
		return s.ResponseWriter.Write(b)
	}
	k := s.boundary(b)
	switch {
	case k >= 0: // an event ends in b: it goes out, with what was held
		if err := s.send(s.held, b[:k]); err != nil {
			return 0, err
		}
		s.held, s.passing = append(s.held[:0], b[k:]...), false
	case s.passing:
		if _, err := s.ResponseWriter.Write(b); err != nil {
			return 0, err
		}
		return len(b), nil
	default:
		s.held = append(s.held, b...)
	}
	if len(s.held) > maxHeld { // too long to hold: passed on as it comes
		if err := s.send(s.held, nil); err != nil {
			return 0, err
		}
		s.held, s.passing = s.held[:0], true
	}
	return len(b), nil
}

// send writes a and b.
func (s *sseWatch) send(a, b []byte) error {
	for _, p := range [...][]byte{a, b} {
		if len(p) > 0 {
			if _, err := s.ResponseWriter.Write(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// boundary scans b, as EventSource splits lines (CRLF, LF or CR; a CRLF
// split across writes is one line end), and returns the index just past
// the last point in it where no event is unfinished, or -1: after a blank
// line (an event is complete), or after a comment line (':') with no
// field line before it in the event (a heartbeat some hosts send without
// a blank line: it is no part of an event, and held back it would not
// keep idle timers on the way to the client from firing).
func (s *sseWatch) boundary(b []byte) int {
	k := -1
	for i, c := range b {
		switch {
		case c == '\n' && s.lastCR: // the LF of a CRLF
			s.lastCR = false
			if k == i {
				k = i + 1
			}
		case c == '\r' || c == '\n':
			if s.lineStart { // an empty line: the event is complete
				s.field = false
			}
			if !s.field {
				k = i + 1
			}
			s.lineStart, s.lastCR = true, c == '\r'
		default:
			if s.lineStart && c != ':' {
				s.field = true // a field line: the event has begun
			}
			s.lineStart, s.lastCR = false, false
		}
	}
	return k
}

// FlushError flushes (the proxy flushes every event-stream write).
func (s *sseWatch) FlushError() error {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (s *sseWatch) Flush() { _ = s.FlushError() }

// Unwrap lets http.ResponseController reach the real writer (Hijack for
// WebSocket goes straight through).
func (s *sseWatch) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}
