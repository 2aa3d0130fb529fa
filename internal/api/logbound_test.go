package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestStoreFailureLogBoundsThePath: the line a store failure logs repeats
// the request's path, which a client may send as long as the header block
// allows (a record's name is read after its zone); past the access log's
// bound it is logged cut, with the access log's marker naming its length,
// so a caller cannot write a line of its own size.
func TestStoreFailureLogBoundsThePath(t *testing.T) {
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	e := newEnv(t, func(o *Options) {
		o.Store, o.NotFound, o.Unavailable = st, store.ErrNotFound, store.Unavailable
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	ns.Shutdown()
	ns.WaitForShutdown()

	path := "/api/v3/dns/zones/z.example/records/" + strings.Repeat("n", 5000) + "/A"
	if r := e.do(http.MethodGet, path, token, nil); r.status != http.StatusServiceUnavailable {
		t.Fatalf("GET with the store down: %d %s, want 503", r.status, r.body)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"api: store unavailable"`) {
			line = l
		}
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		t.Fatalf("no store-unavailable line (%v):\n%.2000s", err, logs.String())
	}
	got, _ := fields["path"].(string)
	marker := "...[truncated from " + strconv.Itoa(len(path)) + " bytes]"
	if len(got) > 2048 || !strings.HasSuffix(got, marker) || !strings.HasPrefix(path, strings.TrimSuffix(got, marker)) {
		t.Errorf("a path of %d bytes logged as %d bytes ending %q; want at most 2048, ending %q", len(path), len(got), got[max(0, len(got)-60):], marker)
	}
	if len(line) > 4096 {
		t.Errorf("a line of %d bytes for a %d-byte path", len(line), len(path))
	}
}
