package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// putApps writes n apps app00000 to app<n-1> to s, 16 writes at a time:
// every 10th (i%10 == 3) is deleted again, and every 13th (i%13 == 5)
// not deleted is a value that does not read, written around the store.
// It returns the ids a list finds, in order.
func putApps(t *testing.T, j jetstream.JetStream, s *store.Store, n int) []string {
	t.Helper()
	ctx := t.Context()
	kv, err := j.KeyValue(ctx, "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range n {
		if i%10 != 3 && i%13 != 5 {
			want = append(want, fmt.Sprintf("app%05d", i))
		}
	}
	ids := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range ids {
				id := fmt.Sprintf("app%05d", i)
				var err error
				switch {
				case i%10 == 3:
					if err = s.PutApp(ctx, &route.App{ID: id}); err == nil {
						err = s.DeleteApp(ctx, id)
					}
				case i%13 == 5:
					_, err = kv.Put(ctx, id, []byte("{not json"))
				default:
					err = s.PutApp(ctx, &route.App{ID: id})
				}
				if err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return want
}

// TestPagesOfThousands: pages of 1250 apps, with deleted ones and values
// that do not read among them, walk every app once and in id order, as
// ListApps lists them, whether the pages list the bucket's keys (at the
// largest size: 1038 apps, two pages, more than pageReaders reads in
// flight) or take the names from the routing table (at a size that ends
// three of its six pages next to skipped keys).
func TestPagesOfThousands(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	want := putApps(t, j, open(t, j, store.Options{}), 1250)
	lister := open(t, j, store.Options{}) // no table: pages list the keys
	follower := open(t, j, store.Options{})
	run(t, follower)
	ctx := t.Context()
	for _, c := range []struct {
		name  string
		s     *store.Store
		limit int
	}{{"list", lister, store.MaxPage}, {"table", follower, 202}} {
		list, err := c.s.ListApps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, a := range list {
			listed = append(listed, a.ID)
		}
		if !slices.Equal(listed, want) {
			t.Fatalf("%s: ListApps lists %d apps, want %d", c.name, len(listed), len(want))
		}
		var got []string
		after, pages := "", 0
		for more := true; more; pages++ {
			if pages > len(want) {
				t.Fatalf("%s: more pages than apps", c.name)
			}
			var page []*route.App
			page, more, err = c.s.PageApps(ctx, after, c.limit)
			if err != nil || len(page) > c.limit || (more && len(page) != c.limit) {
				t.Fatalf("%s, limit %d after %q: %d apps, more %v, %v", c.name, c.limit, after, len(page), more, err)
			}
			for _, a := range page {
				got = append(got, a.ID)
			}
			if len(page) > 0 {
				after = page[len(page)-1].ID
			}
		}
		if wantPages := (len(want) + c.limit - 1) / c.limit; !slices.Equal(got, want) || pages != wantPages {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s, limit %d: %d apps in %d pages, want %d in %d; first difference at %d",
				c.name, c.limit, len(got), pages, len(want), wantPages, i)
		}
	}
}

// TestPageCancelled: a page whose ctx is cancelled while it reads its
// values returns ctx's error at once, sends the leader no more than the
// reads it had in flight, and leaves none of them running, whether the
// page lists the keys or takes the names from the routing table.
//
// Not parallel: it looks for the page's reads among every goroutine.
func TestPageCancelled(t *testing.T) {
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	putApps(t, j, open(t, j, store.Options{}), 500)
	lister := open(t, j, store.Options{})
	follower := open(t, j, store.Options{})
	run(t, follower)
	for _, c := range []struct {
		name string
		s    *store.Store
	}{{"list", lister}, {"table", follower}} {
		t.Run(c.name, func(t *testing.T) {
			const cancelAt = 20
			var reads atomic.Int32
			var readsAtCancel int32
			var cancelled time.Time
			var inFlight bool
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			_, counter := js(t, ns.ClientURL())
			sub, err := counter.Subscribe("$JS.API.STREAM.MSG.GET.KV_gatehouse_apps", func(*nats.Msg) {
				if reads.Add(1) == cancelAt {
					inFlight = pageReadsRunning()
					cancelled = time.Now()
					readsAtCancel = reads.Load()
					cancel()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := counter.Flush(); err != nil {
				t.Fatal(err)
			}
			before := goleak.IgnoreCurrent()

			page, _, err := c.s.PageApps(ctx, "", store.MaxPage)
			returned := time.Now()
			left := pageReadsRunning()

			if !errors.Is(err, context.Canceled) || page != nil {
				t.Fatalf("page cancelled after %d reads: %d apps, %v; want context.Canceled", cancelAt, len(page), err)
			}
			if !inFlight {
				t.Fatal("no page read was seen running while the page read (is pageReadsRunning looking for the right function?)")
			}
			if left {
				t.Error("page reads still running once the page returned")
			}
			if err := goleak.Find(before); err != nil {
				t.Errorf("goroutines left by the cancelled page: %v", err)
			}
			if d := returned.Sub(cancelled); d > 2*time.Second {
				t.Errorf("page returned %s after its ctx was cancelled", d)
			}
			// Every read the page sent is in before the sentinel, sent after them
			// on the same connection.
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			sentinel := make(chan struct{})
			if _, err := counter.Subscribe("sentinel", func(*nats.Msg) { close(sentinel) }); err != nil {
				t.Fatal(err)
			}
			if err := counter.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish("sentinel", nil); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sentinel:
			case <-time.After(5 * time.Second):
				t.Fatal("sentinel never arrived")
			}
			// The reads in flight at the cancel are at most 32; the counter
			// may see a read after its answer, so give it as many again.
			if after := reads.Load() - readsAtCancel; after > 64 {
				t.Errorf("%d reads reached the leader after the cancel, of %d in the page", after, store.MaxPage+1)
			}
		})
	}
}

// pageReadsRunning reports whether a goroutine runs a page's read.
func pageReadsRunning() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Contains(buf[:n], []byte("internal/store.readInOrder"))
		}
		buf = make([]byte, 2*len(buf))
	}
}
