package api

import (
	"errors"
	"net/http/httptest"
	"strings"
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

// A DELETE of a zone removes every record stored under it, a value that
// does not decode (written around the API) included: ListRecords skips
// those, so the DELETE answered 204 with them still in the store, and a
// zone created again under the name took them over.
func TestDeleteZoneRemovesUndecodableRecords(t *testing.T) {
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Store: st, NotFound: store.ErrNotFound, ControlToken: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv, st: st}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.7"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/txt/TXT", `{"values":["hello"]}`, 200)
	kv, err := js.KeyValue(t.Context(), "gatehouse_records")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(t.Context())
	if err != nil || len(keys) != 2 {
		t.Fatalf("record keys %v, %v", keys, err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ".A") {
			if _, err := kv.Put(t.Context(), k, []byte(`{"zone":`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.ok("DELETE", "/api/v3/dns/zones/apps.example.com", nil, 204)
	if keys, err := kv.Keys(t.Context()); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("records left in the store after the zone's DELETE: %v (%v)", keys, err)
	}
	// The same for records a failed DELETE left behind, purged when the
	// zone is created again.
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.7"]}`, 200)
	keys, _ = kv.Keys(t.Context())
	if _, err := kv.Put(t.Context(), keys[0], []byte(`{"zone":`)); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteZone(t.Context(), "apps.example.com"); err != nil {
		t.Fatal(err)
	}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	if keys, err := kv.Keys(t.Context()); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("records of the old zone left in the store after it was created again: %v (%v)", keys, err)
	}
}

// A body within the API's bound whose stored form is past the store's
// (JSON escapes '&' as six bytes) is refused as too large, 413 with
// nothing written, not a 500 that says to try again.
func TestPutPastTheStoreBoundIs413(t *testing.T) {
	e := newEnv(t, nil)
	h := `"` + strings.Repeat("&", 64) + `"`
	n := (maxBody - 100) / (len(h) + 1)
	body := `{"cors":{"allow_headers":[` + strings.TrimSuffix(strings.Repeat(h+",", n), ",") + `]}}`
	if len(body) > maxBody {
		t.Fatalf("body of %d bytes", len(body))
	}
	before := e.snapshot()
	p := problemOf(t, e.ok("PUT", "/api/v3/apps/shop", body, 413))
	if !strings.Contains(p.Detail, "too large") {
		t.Errorf("detail %q", p.Detail)
	}
	if e.snapshot() != before {
		t.Error("the refused PUT changed the store")
	}
}
