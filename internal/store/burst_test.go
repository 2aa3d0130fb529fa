package store_test

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
)

// TestBurstOfChangesReachesAFollower: a burst of 20,000 changes (an
// import, a script) reaches a following gateway whole, and its
// subscription to the buckets' republished copies keeps up with the burst:
// the connection reports no slow consumer, which an operator would see
// as an error in the log.
func TestBurstOfChangesReachesAFollower(t *testing.T) {
	const apps, writers = 20000, 8
	ns := testutil.StartBus(t)
	var slow atomic.Int32
	var other sync.Map // any other asynchronous error, by text
	j1, _ := js(t, ns.ClientURL())
	j2, _ := js(t, ns.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slow.Add(1)
			return
		}
		other.Store(err.Error(), true)
	}))
	s1 := open(t, j1, store.Options{})
	g2 := run(t, open(t, j2, store.Options{}))

	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < apps; i += writers {
				if err := s1.PutApp(t.Context(), &route.App{ID: "burst" + strconv.Itoa(i)}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// The table copies its app entries on each app change, so 20,000 new
	// apps take the follower tens of seconds (minutes under -race): the
	// burst stays queued at it meanwhile, which is what is tested.
	testutil.WaitFor(t, 3*time.Minute, func() bool { return g2.live.Load().Apps() == apps }, "the follower never had every app")
	for i := range apps {
		if id := "burst" + strconv.Itoa(i); g2.live.Load().App(id) == nil {
			t.Fatalf("the follower lacks %s", id)
		}
	}
	if n := slow.Load(); n != 0 {
		t.Errorf("%d slow-consumer errors on the follower's connection", n)
	}
	other.Range(func(k, _ any) bool { t.Errorf("asynchronous error: %v", k); return true })
}
