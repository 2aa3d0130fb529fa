package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// BenchmarkPageApps1000 measures a full page (MaxPage, 1000 apps) of
// 2000: one leader message get per app, up to 32 at a time, from the
// routing table's names ("page") and from a list of the bucket's keys
// ("page-list": no table follows the store), and, for scale, the same
// 1000 leader gets sent 32 at a time alone ("gets-32") and one direct
// get of every key at once (multi_last, "direct-multi"), which any
// replica may answer.
func BenchmarkPageApps1000(b *testing.B) {
	const n = 2000
	ns := testutil.StartBus(b)
	j, nc := js(b, ns.ClientURL())
	s := open(b, j, store.Options{})
	ctx := b.Context()
	for i := range n {
		mustPut(b, s.PutApp(ctx, &route.App{ID: fmt.Sprintf("app%06d", i)}))
	}
	lister := open(b, j, store.Options{})
	run(b, s)
	for _, c := range []struct {
		name string
		s    *store.Store
	}{{"page", s}, {"page-list", lister}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				page, more, err := c.s.PageApps(ctx, "", store.MaxPage)
				if err != nil || !more || len(page) != store.MaxPage {
					b.Fatalf("page: %d apps, more %v, %v", len(page), more, err)
				}
			}
		})
	}
	b.Run("gets-32", func(b *testing.B) {
		for range b.N {
			var wg sync.WaitGroup
			ids := make(chan int)
			for range 32 {
				wg.Go(func() {
					for i := range ids {
						req, _ := json.Marshal(map[string]string{"last_by_subj": fmt.Sprintf("$KV.gatehouse_apps.app%06d", i)})
						if _, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_gatehouse_apps", req); err != nil {
							b.Error(err)
						}
					}
				})
			}
			for i := range store.MaxPage {
				ids <- i
			}
			close(ids)
			wg.Wait()
		}
	})
	b.Run("direct-multi", func(b *testing.B) {
		subjs := make([]string, store.MaxPage)
		for i := range subjs {
			subjs[i] = fmt.Sprintf("$KV.gatehouse_apps.app%06d", i)
		}
		req, _ := json.Marshal(map[string]any{"multi_last": subjs})
		for range b.N {
			inbox := nc.NewRespInbox()
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				b.Fatal(err)
			}
			if err := nc.PublishRequest("$JS.API.DIRECT.GET.KV_gatehouse_apps", inbox, req); err != nil {
				b.Fatal(err)
			}
			got := 0
			for {
				m, err := sub.NextMsg(5e9)
				if err != nil {
					b.Fatal(err)
				}
				if len(m.Data) == 0 && m.Header.Get("Status") == "204" {
					break
				}
				got++
			}
			_ = sub.Unsubscribe()
			if got != store.MaxPage {
				b.Fatalf("direct multi: %d messages", got)
			}
		}
	})
}
