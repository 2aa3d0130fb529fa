package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
)

// followStore runs st.Run into a routing table of its own, as a gateway
// does, until the returned stop is called or t ends, and returns once
// the first load is published.
func followStore(t testing.TB, st *store.Store) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx, route.NewBuilder(new(route.Live))) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	select {
	case <-st.Synced():
	case <-time.After(20 * time.Second):
		t.Fatal("store never synced")
	}
	return stop
}

// listCount counts the whole-bucket lists of mappings its store makes.
type listCount struct {
	Store
	domains atomic.Int32
}

func (l *listCount) ListDomains(ctx context.Context) ([]*route.Domain, error) {
	l.domains.Add(1)
	return l.Store.ListDomains(ctx)
}

// newFollowedEnv is newEnv on a store whose routing table follows it
// (stop ends that), its lists of mappings counted.
func newFollowedEnv(t *testing.T) (e *env, lc *listCount, stop func()) {
	t.Helper()
	e = newEnv(t, func(o *Options) {
		lc = &listCount{Store: o.Store}
		o.Store = lc
	})
	return e, lc, followStore(t, lc.Store.(*store.Store))
}

// TestDeleteAppListsNoMappings: while the routing table follows the
// store, an app's DELETE finds the mappings that name it without listing
// every mapping (each value read and decoded: seconds and gigabytes at a
// million), and answers as the list did: 409 naming them, in order, with
// their state, and 204 once none is left. Mappings to other apps and ones
// just moved away do not count.
func TestDeleteAppListsNoMappings(t *testing.T) {
	e, lc, _ := newFollowedEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	for _, d := range []string{"b.customer.example", "a.customer.example", "moved.customer.example"} {
		e.ok("PUT", "/api/v3/domains/"+d, `{"app":"shop"}`, 200)
	}
	e.ok("POST", "/api/v3/domains/b.customer.example/verify", `{"method":"manual"}`, 200)
	e.ok("PUT", "/api/v3/domains/blog.customer.example", `{"app":"blog"}`, 200)
	e.ok("PUT", "/api/v3/domains/moved.customer.example", `{"app":"blog"}`, 200)

	p := problemOf(t, e.ok("DELETE", "/api/v3/apps/shop", nil, 409))
	want := `app "shop" is still named by domain a.customer.example, domain b.customer.example (verified); delete those first`
	if !strings.HasPrefix(p.Detail, want) {
		t.Errorf("detail %q, want it to start %q", p.Detail, want)
	}
	e.ok("DELETE", "/api/v3/domains/a.customer.example", nil, 204)
	e.ok("DELETE", "/api/v3/domains/b.customer.example", nil, 204)
	e.ok("DELETE", "/api/v3/apps/shop", nil, 204)
	if n := lc.domains.Load(); n != 0 {
		t.Errorf("the DELETEs listed every mapping %d times; want none while the table follows the store", n)
	}
}

// TestDeleteAppListsManyMappings: an app named by more mappings than
// maxReadBack has them listed, not each read back (a read each took
// 1.3 s at 20,000 mappings naming the app where the list took 0.13 s),
// and the 409 names them all the same.
func TestDeleteAppListsManyMappings(t *testing.T) {
	e, lc, _ := newFollowedEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	st := lc.Store.(*store.Store)
	for i := range maxReadBack + 1 {
		d := &route.Domain{Domain: fmt.Sprintf("d%04d.customer.example", i), App: "shop", Token: "t"}
		if err := st.PutDomain(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	p := problemOf(t, e.ok("DELETE", "/api/v3/apps/shop", nil, 409))
	want := `app "shop" is still named by domain d0000.customer.example, domain d0001.customer.example,`
	if !strings.HasPrefix(p.Detail, want) {
		t.Errorf("detail %q, want it to start %q", p.Detail, want)
	}
	if lc.domains.Load() == 0 {
		t.Error("the mappings naming the app were read back one by one; want them listed past maxReadBack")
	}
}

// TestDeleteAppListsWhenTableStopped: with no table following the store
// (Run stopped, as on a gateway shutting down, or never run), a DELETE
// lists the mappings as before, and still refuses an app that one names.
func TestDeleteAppListsWhenTableStopped(t *testing.T) {
	e, lc, stop := newFollowedEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	stop()
	e.ok("PUT", "/api/v3/domains/www.customer.example", `{"app":"shop"}`, 200)
	p := problemOf(t, e.ok("DELETE", "/api/v3/apps/shop", nil, 409))
	if !strings.Contains(p.Detail, "domain www.customer.example") {
		t.Errorf("detail %q does not name the mapping", p.Detail)
	}
	if lc.domains.Load() == 0 {
		t.Error("the DELETE answered without the table or a list")
	}
	e.ok("DELETE", "/api/v3/domains/www.customer.example", nil, 204)
	e.ok("DELETE", "/api/v3/apps/shop", nil, 204)
}

// BenchmarkDeleteApp measures an app's DELETE (the app put back between
// runs) among 20,000 mappings of other apps, as the list found its
// references ("list": no table follows the store) and as the table does.
func BenchmarkDeleteApp(b *testing.B) {
	for _, mode := range []string{"list", "table"} {
		b.Run(mode, func(b *testing.B) {
			st, _ := newStore(b)
			s := st.(*store.Store)
			ctx := b.Context()
			for i := range 20000 {
				if err := s.PutDomain(ctx, &route.Domain{Domain: fmt.Sprintf("d%05d.customer.example", i), App: "other", Token: "t"}); err != nil {
					b.Fatal(err)
				}
			}
			if mode == "table" {
				followStore(b, s)
			}
			a, err := New(Options{Store: s, NotFound: store.ErrNotFound, BadValue: store.ErrBadValue, ControlToken: token})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(a)
			defer srv.Close()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if err := s.PutApp(ctx, &route.App{ID: "shop", Mode: route.ModeHTTP, Status: route.StatusActive}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				req, _ := http.NewRequest("DELETE", srv.URL+"/api/v3/apps/shop", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				res, err := srv.Client().Do(req)
				if err != nil {
					b.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusNoContent {
					b.Fatalf("DELETE: %d", res.StatusCode)
				}
			}
		})
	}
}
