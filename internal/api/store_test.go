package api

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
)

// newStore opens a real store on a fresh embedded NATS with JetStream and
// returns it with its not-found sentinel.
func newStore(t *testing.T) (Store, error) {
	t.Helper()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st, store.ErrNotFound
}

var _ Store = (*store.Store)(nil)
