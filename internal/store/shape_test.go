package store_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// operatorStream is a bucket's stream as an operator may have made or
// tuned it: no direct gets, more history than nats.go's KeyValueConfig
// can say (it stops at 64), limits of their own, no republish and no
// rollups.
func operatorStream(bucket string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: "KV_" + bucket, Subjects: []string{"$KV." + bucket + ".>"}, Description: "ops",
		Storage: jetstream.FileStorage, Replicas: 1, MaxMsgsPerSubject: 100, MaxMsgs: 100000, MaxBytes: 64 << 20,
		MaxMsgSize: 1 << 20, MaxConsumers: 50, Duplicates: 30 * time.Second, Discard: jetstream.DiscardOld,
		DenyDelete: true, AllowDirect: false, Metadata: map[string]string{"owner": "ops"},
	}
}

// Open owns of a bucket's stream only what the gateway needs, and leaves
// every other setting as the operator made it: the replica floor, the
// republish its followers read (DESIGN §10, docs/config.md), rollups
// (every delete is a purge) and, on the locks bucket, per-message TTLs
// (every lock). It rebuilt the whole stream from nats.go's KeyValueConfig
// whenever it changed one of them, turning direct gets back on, limits
// back to none and deletes back to denied; a stream with more history than
// that config can say made the start fail ("history too large").
func TestOpenKeepsOperatorBucketSettings(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	ctx := t.Context()
	buckets := []string{"gatehouse_apps", "gatehouse_domains", "gatehouse_locks"}
	for _, b := range buckets {
		cfg := operatorStream(b)
		if b == "gatehouse_domains" {
			// Cut to headers, the republish gave the followers every
			// write as an empty value, which they dropped.
			cfg.RePublish = &jetstream.RePublish{Source: "$KV." + b + ".>", Destination: "gatehouse._store." + b + ".>", HeadersOnly: true}
		}
		if _, err := j.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	s, err := store.Open(ctx, j, store.Options{})
	if err != nil {
		t.Fatalf("Open over an operator's streams: %v", err)
	}
	for _, b := range buckets {
		st, err := j.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		got, want := st.CachedInfo().Config, operatorStream(b)
		want.AllowRollup = true
		if b == "gatehouse_locks" {
			want.AllowMsgTTL = true
		} else {
			want.RePublish = &jetstream.RePublish{Source: "$KV." + b + ".>", Destination: "gatehouse._store." + b + ".>"}
		}
		// What the server fills in itself.
		want.Retention, want.Metadata = got.Retention, got.Metadata
		if got.Metadata["owner"] != "ops" {
			t.Errorf("%s: metadata %v, the operator's lost", b, got.Metadata)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s after Open:\n got %+v\nwant %+v", b, got, want)
		}
	}
	g := run(t, s)
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a"}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "www.a.test", App: "a", Verified: true}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("www.a.test", "a") }, "the custom domain is not routed")
	if err := s.DeleteApp(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteApp(missing) = %v", err)
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "b"}))
	if err := s.DeleteApp(ctx, "b"); err != nil {
		t.Errorf("DeleteApp on a bucket made without rollups: %v", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Certs().Lock(lctx, "issue"); err != nil {
		t.Fatalf("Lock on a bucket made without per-message TTLs: %v", err)
	}
	if err := s.Certs().Unlock(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
}

// An Open that has nothing to change sends no stream update: an update
// the server applies is a stream advisory, a round of the stream's
// replicas and a reset of whatever it rewrites, at every start.
func TestOpenSendsNoNeedlessUpdate(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	ctx := t.Context()
	// An operator's stream that Open reshapes once.
	cfg := operatorStream("gatehouse_domains")
	cfg.MaxMsgsPerSubject = 5
	if _, err := j.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	open(t, j, store.Options{})
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	open(t, j, store.Options{})
	// A sentinel update, whose advisory comes after any Open caused.
	sentinel := jetstream.StreamConfig{Name: "SENTINEL", Subjects: []string{"sentinel"}}
	if _, err := j.CreateStream(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	sentinel.Description = "updated"
	if _, err := j.UpdateStream(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-ch:
			if strings.HasSuffix(m.Subject, ".SENTINEL") {
				return
			}
			t.Errorf("the second Open updated a stream: %s", m.Subject)
		case <-time.After(5 * time.Second):
			t.Fatal("no advisory for the sentinel's update")
		}
	}
}

// A republish that differs from the gateway's only in its source (a
// republish made without one has the server's ">", whose copies arrive
// as gatehouse._store.<bucket>.$KV.<bucket>.<key>) is replaced, and the
// warning says what it was: it said only the destination, the same as
// the one it was replaced with.
func TestOpenNamesTheRepublishItReplaces(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	ctx := t.Context()
	cfg := operatorStream("gatehouse_apps")
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "gatehouse._store.gatehouse_apps.>"}
	if _, err := j.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	if _, err := store.Open(ctx, j, store.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	var warn string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "replacing a bucket's republish") {
			warn = line
		}
	}
	if !strings.Contains(warn, "from_source=>") || !strings.Contains(warn, "to_source=$KV.gatehouse_apps.>") {
		t.Errorf("the warning does not say which source was replaced: %q", warn)
	}
}

// A bucket that denies purges cannot be given rollups, and every delete
// from it fails ("rollup not permitted"): the start goes on, and says so
// once, naming the bucket, rather than leave the operator to find out at
// the first delete (or at every ACME lock held until its TTL, when it is
// the locks bucket).
func TestOpenWarnsOfABucketThatDeniesPurges(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	ctx := t.Context()
	cfg := operatorStream("gatehouse_locks")
	cfg.DenyPurge = true
	if _, err := j.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s, err := store.Open(ctx, j, store.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "denies purges") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "bucket=gatehouse_locks") {
		t.Errorf("warnings of a bucket that denies purges: %q", warned)
	}
	// What the warning is for.
	if err := s.Certs().Lock(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Certs().Unlock(ctx, "x"); err == nil || !strings.Contains(err.Error(), "rollup not permitted") {
		t.Errorf("Unlock on a bucket that denies purges: %v", err)
	}
}

// A start retries a failed Open with the same logger (internal/gatehouse:
// on a server with a cluster name but no cluster, at once with one
// replica; while a cluster elects leaders or a node is down, every few
// seconds for as long as that lasts), and each try said again what it
// found: the warning of a bucket that denies purges, and the raise or the
// republish replaced, whose update had failed. Each is said once: the
// condition once the buckets are bound, a change once it is done, and a
// change never done not at all.
func TestOpenRetriedSaysEachNoteOnce(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	ctx := t.Context()
	cfg := operatorStream("gatehouse_apps")
	cfg.DenyPurge = true
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "elsewhere.>"}
	if _, err := j.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	logs := new(logCount)
	o := store.Options{Replicas: 3, Logger: slogger(logs)}
	if _, err := store.Open(ctx, j, o); err == nil {
		t.Fatal("Open with 3 replicas on a server with no cluster: no error")
	}
	o.Replicas = 0
	if _, err := store.Open(ctx, j, o); err != nil {
		t.Fatal(err)
	}
	for note, want := range map[string]int{"denies purges": 1, "replacing a bucket's republish": 1, "raising a bucket's replicas": 0} {
		if n := logs.count(note); n != want {
			t.Errorf("a failed Open and its retry logged %q %d times, want %d; logged: %q", note, n, want, logs.msgs)
		}
	}
}
