package store

import (
	"context"
	"errors"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Unavailable reports whether err says the store could not be reached or
// could not answer right now (the bus down, a stream without quorum or
// leader, a call that timed out, an update that never got its write in),
// as opposed to a refusal or a bug: a caller may try again later. The
// control API answers these 503 with Retry-After.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{
		errLostRaces, ErrNoQuorum, nats.ErrNoResponders, nats.ErrTimeout, nats.ErrConnectionClosed, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled,
		jetstream.ErrServerShutdown, context.DeadlineExceeded,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil && je.APIError().Code == http.StatusServiceUnavailable {
		return true
	}
	// A KV watch (the lists) is made through nats.go's older JetStream
	// layer, whose errors are of its own type: a stream without quorum
	// says "JetStream system temporarily unavailable" (503) there.
	var ne nats.JetStreamError
	return errors.As(err, &ne) && ne.APIError() != nil && ne.APIError().Code == http.StatusServiceUnavailable
}
