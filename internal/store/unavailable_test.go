package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/internal/store"
)

func TestUnavailable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{store.ErrNotFound, false},
		{fmt.Errorf("store: put: %w", store.ErrBadValue), false},
		{errors.New("wrong last sequence"), false},
		{fmt.Errorf("store: get: %w", nats.ErrNoResponders), true},
		{fmt.Errorf("store: put: %w", jetstream.ErrNoStreamResponse), true},
		{fmt.Errorf("store: list: %w", context.DeadlineExceeded), true},
		{nats.ErrConnectionReconnecting, true},
	} {
		if got := store.Unavailable(tt.err); got != tt.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
