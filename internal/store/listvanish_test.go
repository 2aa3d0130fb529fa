package store_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A list whose latest entry, a delete marker, is swept away between the
// leader's answer and the watch (the sweep's purge, on a marker past
// MarkerAge) answers at once with the live keys: nothing under the
// filter will ever reach that sequence, and the list waited out its
// deadline (or the 5 s API timeout) and failed (503). The store's
// JetStream API goes through a proxy here that purges the marker right
// after the leader has named it.
func TestListWhoseLatestMarkerIsSweptAnswers(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	direct, _ := js(t, ns.ClientURL())
	proxy := testutil.Connect(t, ns.ClientURL())
	var armed atomic.Bool
	var purged atomic.Int64
	_, err := proxy.Subscribe("$P.API.>", func(m *nats.Msg) {
		// A KV put under a prefix is "<prefix>.$KV...", for an import.
		subj := strings.TrimPrefix(m.Subject, "$P.API.")
		if !strings.HasPrefix(subj, "$KV.") {
			subj = "$JS.API." + subj
		}
		fwd := nats.NewMsg(subj)
		fwd.Data, fwd.Header = m.Data, m.Header
		resp, err := proxy.RequestMsg(fwd, 5*time.Second)
		if err != nil {
			return
		}
		var req struct {
			LastBySubj string `json:"last_by_subj"`
		}
		var got struct {
			Message *struct {
				Subject string `json:"subject"`
				Seq     uint64 `json:"seq"`
			} `json:"message"`
		}
		if strings.HasPrefix(m.Subject, "$P.API.STREAM.MSG.GET.") && json.Unmarshal(m.Data, &req) == nil &&
			req.LastBySubj == "$KV.gatehouse_apps.>" && json.Unmarshal(resp.Data, &got) == nil && got.Message != nil &&
			armed.CompareAndSwap(true, false) {
			st, err := direct.Stream(t.Context(), "KV_gatehouse_apps")
			if err == nil {
				err = st.Purge(t.Context(), jetstream.WithPurgeSubject(got.Message.Subject), jetstream.WithPurgeSequence(got.Message.Seq+1))
			}
			if err != nil {
				t.Errorf("purge %s: %v", got.Message.Subject, err)
			}
			purged.Add(1)
		}
		_ = m.RespondMsg(&nats.Msg{Data: resp.Data, Header: resp.Header})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Flush(); err != nil {
		t.Fatal(err)
	}
	j, err := jetstream.NewWithAPIPrefix(testutil.Connect(t, ns.ClientURL()), "$P.API")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "kept"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "gone"}))
	mustPut(t, s.DeleteApp(ctx, "gone"))

	armed.Store(true)
	start := time.Now()
	apps, err := s.ListApps(ctx)
	took := time.Since(start)
	if purged.Load() != 1 {
		t.Fatalf("the proxy purged %d markers; want the one the leader named", purged.Load())
	}
	var ids []string
	for _, a := range apps {
		ids = append(ids, a.ID)
	}
	if err != nil || !slices.Equal(ids, []string{"kept"}) {
		t.Errorf("list apps after its latest marker was swept: %q, %v (in %s); want [kept]", ids, err, took.Round(time.Millisecond))
	}
}
