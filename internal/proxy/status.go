package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
)

// The causes a [Options.Fallback] may see, and that statusFor maps.
var (
	// ErrNoHost: no host, in any state, claims the app (503).
	ErrNoHost = errors.New("proxy: no host serves this app")
	// ErrNoRoutableHost: hosts claim the app but none is verified and
	// healthy, or none speaks HTTP (502). Its text is the client's
	// detail (detailFor), as ErrNoHost's is: the log line and the answer
	// name the case alike.
	ErrNoRoutableHost = errors.New("proxy: no healthy host for this app")
	// ErrUnreachable: every tried host refused or failed the connection
	// (502). It wraps the last dial error.
	ErrUnreachable = errors.New("proxy: every host is unreachable")
	// errNotApp: dispatch was reached without a routed app; a wiring bug.
	errNotApp = errors.New("proxy: request was not routed to an app")
	// errBadBody: the client's request body could not be read (400).
	errBadBody = errors.New("proxy: the request body could not be read")
	// errBodyStalled: the client's request body stopped coming for the
	// listener's bound (408).
	errBodyStalled = errors.New("proxy: the request body stalled")
)

// StatusClientClosed is logged (never sent) when the client went away
// first, after nginx's 499.
const StatusClientClosed = 499

// statusFor is the one place an upstream error becomes a status code
// (STYLE §3.2).
func statusFor(err error) int {
	switch {
	// A stalled upload also cancels the request (net/http does, when the
	// body's deadline fires): it is the client's 408, not its leaving.
	case errors.Is(err, errBodyStalled):
		return http.StatusRequestTimeout
	case errors.Is(err, context.Canceled):
		return StatusClientClosed
	case errors.Is(err, ErrNoHost):
		return http.StatusServiceUnavailable
	// Before the timeouts: a connect that timed out is an unreachable
	// host, as one refused, whichever of the dialer's clocks ended it
	// (its context's error is also context.DeadlineExceeded, its
	// socket's is not).
	case isDial(err), errors.Is(err, ErrNoRoutableHost), errors.Is(err, ErrUnreachable):
		return http.StatusBadGateway
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case isTimeout(err):
		return http.StatusGatewayTimeout
	case errors.Is(err, errNotApp):
		return http.StatusInternalServerError
	case errors.Is(err, errBadBody):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

// reasonFor is the metrics reason of an upstream error.
func reasonFor(err error) string {
	switch {
	case errors.Is(err, errBodyStalled):
		return metrics.ReasonBadBody
	case errors.Is(err, context.Canceled):
		return metrics.ReasonCanceled
	case errors.Is(err, ErrNoHost), errors.Is(err, ErrNoRoutableHost):
		return metrics.ReasonNoHost
	case isDial(err), errors.Is(err, ErrUnreachable):
		return metrics.ReasonDial
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return metrics.ReasonTimeout
	case errors.Is(err, errBadBody):
		return metrics.ReasonBadBody
	}
	return metrics.ReasonOther
}

// detailFor is the problem detail for a status: fixed text, so no error
// string (which may name an internal address) ever reaches a client.
func detailFor(status int, err error) string {
	switch {
	case errors.Is(err, ErrNoHost):
		return "no host serves this app"
	case errors.Is(err, ErrNoRoutableHost):
		return "no healthy host for this app"
	case status == http.StatusGatewayTimeout:
		return "the app did not answer in time"
	case status == http.StatusBadGateway:
		return "the app is unreachable"
	case status == http.StatusBadRequest:
		return "the request body could not be read"
	case status == http.StatusRequestTimeout:
		return "the request body stopped coming"
	}
	return "the request could not be proxied"
}

// isDial reports whether err is a failure to connect: nothing was sent, so
// the request may go to another host whatever its method.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isConnBroken reports whether err is the host's connection failing under
// a request: a network error, or the connection closing early.
func isConnBroken(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
