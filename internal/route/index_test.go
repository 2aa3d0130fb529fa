package route

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

func TestKeyed(t *testing.T) {
	tests := []struct {
		name string
		keys []string
	}{
		{"empty key", []string{""}},
		{"one", []string{"a"}},
		{"long keys", []string{strings.Repeat("x", 127), strings.Repeat("y", 128), strings.Repeat("z", 300)}},
		{"growth", func() []string {
			var ks []string
			for i := range 5000 {
				ks = append(ks, fmt.Sprintf("k%d", i))
			}
			return ks
		}()},
		{"growth, long keys", func() []string {
			var ks []string
			for i := range 3000 {
				ks = append(ks, fmt.Sprintf("www.customer-%d.example.com", i))
			}
			return ks
		}()},
		{"prefixes", []string{"a", "ab", "abc", "abcd", "b", "ba"}},
		{"around the inline length", []string{"1234567", "12345678", "123456789", "123456789012345", "1234567890123456",
			"12345678901234567", "1234567890123457", "12345678901234568", "2234567890123456", "12345678901234567890123456789012"}},
		{"zero bytes", []string{"a", "a\x00", "a\x00\x00", "\x00", "\x00\x00", strings.Repeat("\x00", 16), strings.Repeat("\x00", 17)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k strIndex[string]
			if k.get("a") != nil || k.find("") != nil {
				t.Fatal("empty index finds a key")
			}
			for _, key := range tt.keys {
				k.set(key, &key)
			}
			if k.live != len(tt.keys) || k.n != len(tt.keys) {
				t.Fatalf("live %d, n %d, want %d", k.live, k.n, len(tt.keys))
			}
			set := map[string]bool{}
			for _, key := range tt.keys {
				set[key] = true
			}
			for _, key := range tt.keys {
				if v := k.get(key); v == nil || *v != key {
					t.Fatalf("get(%q) = %v", key, v)
				}
				for _, other := range []string{key + "!", key + "\x00", key[:len(key)/2]} {
					if v := k.get(other); (v != nil) != set[other] || v != nil && *v != other {
						t.Fatalf("get(%q) = %v", other, v)
					}
				}
			}
			if len(tt.keys) > 1000 {
				// Keys far from home, and lookups of them, are covered.
				over := 0
				for _, s := range k.slots {
					if s.tag&overflow != 0 {
						over++
					}
				}
				if over == 0 {
					t.Fatal("no slot has the overflow bit")
				}
			}
			// Deleting keeps the slot but not the value.
			s := k.find(tt.keys[0])
			if !k.clear(s) || k.clear(s) || k.get(tt.keys[0]) != nil || k.live != len(tt.keys)-1 || k.find(tt.keys[0]) != s {
				t.Fatal("clear")
			}
			if got := len(k.all()); got != len(tt.keys)-1 {
				t.Fatalf("all() has %d values, want %d", got, len(tt.keys)-1)
			}
			// A copy with its own slots does not change the original.
			c := k
			c.cloneSlots()
			c.set(tt.keys[0], &tt.keys[0])
			c.set("new key", &tt.keys[0])
			c.set("a new key longer than sixteen bytes", &tt.keys[0])
			if k.get(tt.keys[0]) != nil || k.get("new key") != nil || k.get("a new key longer than sixteen bytes") != nil ||
				c.get("new key") == nil || c.get(tt.keys[0]) == nil || c.get("a new key longer than sixteen bytes") == nil {
				t.Fatal("a derived copy changed its origin")
			}
		})
	}
}

// TestFindComparesEachWord puts in a key's window a slot for another key
// whose tag and first word differ from the key's in the same bit: find
// must not take one for the other. (It once did: in a|b^c, | and ^ bind
// alike, so a tag difference could cancel a key difference, and one host
// name in about a million of the same shape routed to another's app.)
func TestFindComparesEachWord(t *testing.T) {
	for _, key := range []string{"adz", "a216.z.example", "0123456789abcdef"} {
		w0, w1 := words(key)
		bit := uint64(1) << 11 // the lowest of the tag's hash bits
		for w0&bit == 0 {
			bit <<= 1
		}
		if bit >= 1<<32 {
			t.Fatalf("%q has no set bit in the tag's hash bits", key)
		}
		for range 20 { // each index has a new hash seed
			x := newStrIndex[string](0, 0)
			x.slots = make([]islot[string], 1024)
			h := maphash.String(x.seed, key)
			other := "not " + key
			at := home(h, len(x.slots))
			x.slots[at] = islot[string]{tag: tagOf(h, len(key)) ^ uint32(bit), w0: w0 &^ bit, w1: w1, v: &other}
			x.n, x.live = 1, 1
			if s := x.find(key); s != nil {
				t.Fatalf("find(%q) found the slot of another key (slot %d of %d)", key, at, len(x.slots))
			}
			x.set(key, &key)
			if v := x.get(key); v == nil || *v != key {
				t.Fatalf("get(%q) = %v after set", key, v)
			}
		}
	}
}

// refNames is the routing state as plain maps, and refLookup the lookup
// algorithm before the name index: what the index must agree with.
type refNames struct {
	zones   map[string]*Zone
	apps    map[string]*App
	domains map[string]*Domain
}

func (r *refNames) clone() *refNames {
	return &refNames{maps.Clone(r.zones), maps.Clone(r.apps), maps.Clone(r.domains)}
}

func (r *refNames) lookup(host string) Match {
	name, ok := NormalizeHost(host)
	if !ok {
		return Match{}
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		if z := r.zones[name[i+1:]]; z != nil {
			label := name[:i]
			if label == ReservedLabel {
				return Match{Kind: KindAPI, Zone: z, Name: name}
			}
			if a := r.apps[label]; a != nil {
				return Match{Kind: KindApp, App: a, Zone: z, Name: name}
			}
		}
	}
	if d := r.domains[name]; d != nil && d.Verified {
		if a := r.apps[d.App]; a != nil {
			return Match{Kind: KindApp, App: a, Name: name}
		}
	}
	return Match{Name: name}
}

// check compares every read of tbl with the reference state for hosts.
func (r *refNames) check(t *testing.T, tbl *Table, hosts []string) {
	t.Helper()
	for _, h := range hosts {
		if got, want := tbl.Lookup(h), r.lookup(h); got != want {
			t.Fatalf("Lookup(%q) = %+v, want %+v", h, got, want)
		}
	}
	for id, a := range r.apps {
		if tbl.App(id) != a {
			t.Fatalf("App(%q) = %p, want %p", id, tbl.App(id), a)
		}
	}
	for name, d := range r.domains {
		if tbl.Domain(name) != d {
			t.Fatalf("Domain(%q) = %p, want %p", name, tbl.Domain(name), d)
		}
	}
	ids := slices.Sorted(maps.Keys(r.apps))
	if got := tbl.AppIDs(); !slices.Equal(got, ids) && !(len(got) == 0 && len(ids) == 0) {
		t.Fatalf("AppIDs() = %v, want %v", got, ids)
	}
	if tbl.Apps() != len(r.apps) {
		t.Fatalf("Apps() = %d, want %d", tbl.Apps(), len(r.apps))
	}
	doms := slices.Collect(maps.Values(r.domains))
	sort.Slice(doms, func(i, j int) bool { return doms[i].Domain < doms[j].Domain })
	if got := tbl.Domains(); !slices.Equal(got, doms) && !(len(got) == 0 && len(doms) == 0) {
		t.Fatalf("Domains() = %v, want %v", got, doms)
	}
}

// TestDomainResolution follows one custom domain through the changes that
// decide where it routes.
func TestDomainResolution(t *testing.T) {
	const dom = "www.shop.test"
	type step struct {
		do   func(b *Builder)
		want string // the app dom routes to, or ""
	}
	putApp := func(id string) func(*Builder) { return func(b *Builder) { b.PutApp(&App{ID: id}) } }
	putZone := func(name string) func(*Builder) { return func(b *Builder) { b.PutZone(&Zone{Name: name}, 0) } }
	putDom := func(app string, verified bool) func(*Builder) {
		return func(b *Builder) { b.PutDomain(&Domain{Domain: dom, App: app, Verified: verified}) }
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"verified", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}}},
		{"unverified", []step{{putApp("shop"), ""}, {putDom("shop", false), ""}}},
		{"verified later", []step{{putApp("shop"), ""}, {putDom("shop", false), ""}, {putDom("shop", true), "shop"}}},
		{"unverified later", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}, {putDom("shop", false), ""}}},
		{"deleted", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}, {func(b *Builder) { b.DeleteDomain(dom) }, ""}}},
		{"deleted and put again", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"},
			{func(b *Builder) { b.DeleteDomain(dom) }, ""}, {putDom("shop", true), "shop"}}},
		{"moved", []step{{putApp("shop"), ""}, {putApp("blog"), ""}, {putDom("shop", true), "shop"}, {putDom("blog", true), "blog"}}},
		{"moved to a missing app", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}, {putDom("nope", true), ""}}},
		{"app deleted", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}, {func(b *Builder) { b.DeleteApp("shop") }, ""}}},
		{"app deleted and put again", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"},
			{func(b *Builder) { b.DeleteApp("shop") }, ""}, {putApp("shop"), "shop"}}},
		{"app after domain", []step{{putDom("shop", true), ""}, {putApp("shop"), "shop"}}},
		{"app replaced", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}, {putApp("shop"), "shop"}}},
		{"replace drops it", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"},
			{func(b *Builder) { b.Replace(State{Apps: []*App{{ID: "shop"}}}) }, ""}}},
		{"replace keeps it", []step{{func(b *Builder) {
			b.Replace(State{Apps: []*App{{ID: "shop"}}, Domains: []*Domain{{Domain: dom, App: "shop", Verified: true}}})
		}, "shop"}}},
		// A domain one label under a zone (www.shop.test under
		// shop.test) routes however the zone and the mapping came.
		{"zone after domain", []step{{putApp("shop"), ""}, {putDom("shop", true), "shop"}, {putZone("shop.test"), "shop"}}},
		{"domain after zone", []step{{putZone("shop.test"), ""}, {putApp("shop"), ""}, {putDom("shop", true), "shop"}}},
		{"zone and domain replaced", []step{{func(b *Builder) {
			b.Replace(State{Zones: []*Zone{{Name: "shop.test"}}, Apps: []*App{{ID: "shop"}},
				Domains: []*Domain{{Domain: dom, App: "shop", Verified: true}}})
		}, "shop"}}},
		{"zone deleted and put again", []step{{putApp("shop"), ""}, {putZone("shop.test"), ""}, {putDom("shop", true), "shop"},
			{func(b *Builder) { b.DeleteZone("shop.test", 0) }, "shop"}, {putZone("shop.test"), "shop"}}},
		{"replace with duplicates: last wins", []step{{func(b *Builder) {
			b.Replace(State{Apps: []*App{{ID: "shop"}, {ID: "blog"}}, Domains: []*Domain{
				{Domain: dom, App: "shop", Verified: true}, {Domain: dom, App: "blog", Verified: true}}})
		}, "blog"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(new(Live))
			for i, s := range tt.steps {
				before := b.Live().Load()
				was := before.Lookup(dom)
				s.do(b)
				m := b.Live().Load().Lookup(dom)
				got := ""
				if m.Kind == KindApp {
					got = m.App.ID
					if m.App != b.Live().Load().App(got) {
						t.Fatalf("step %d: routed to a stale *App", i)
					}
				}
				if got != s.want {
					t.Fatalf("step %d: %s routes to %q, want %q", i, dom, got, s.want)
				}
				if before.Lookup(dom) != was {
					t.Fatalf("step %d changed an older snapshot", i)
				}
			}
		})
	}
}

// TestLookupAgreesWithMaps runs random changes through a Builder and plain
// maps and checks after each that every read of the table agrees with the
// lookup over maps, and that older snapshots do not change. Enough apps
// and domains are deleted for the index to be rebuilt along the way.
func TestLookupAgreesWithMaps(t *testing.T) {
	defer func(n int) { rebuildMin = n }(rebuildMin)
	rebuildMin = 16
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 6))
			// Some ids, zones and domains are not clean names (upper
			// case, a port, a trailing dot, a bad byte): found by their
			// exact bytes, never by a host, however it is written.
			ids := func(n int) string {
				if rng.IntN(16) == 0 { // not a clean name
					return fmt.Sprintf([]string{"A%d", "a%d_"}[rng.IntN(2)], rng.IntN(4))
				}
				return fmt.Sprintf("a%d", rng.IntN(n))
			}
			// More zones than maxZoneList, so that the zones are found
			// by scan and by map as they come and go.
			zones := []string{"apps.test", "z.example", "localhost", "a1.apps.test", "Apps.Test", "bad_zone.test"}
			for i := range maxZoneList {
				zones = append(zones, fmt.Sprintf("z%d.test", i))
			}
			names := func() string {
				switch rng.IntN(9) {
				case 0, 1:
					return fmt.Sprintf("www.c%d.test", rng.IntN(60))
				case 2, 3:
					return fmt.Sprintf("a%d.%s", rng.IntN(60), zones[rng.IntN(len(zones))]) // a custom domain under a zone
				case 4, 5:
					return fmt.Sprintf("c%d.example", rng.IntN(60))
				case 6, 7:
					return fmt.Sprintf("a%d", rng.IntN(60))
				default: // not a clean name
					f := []string{"WWW.C%d.TEST", "www.c%d.test:443", "www.c%d.test.", "www.c%d_.test"}[rng.IntN(4)]
					return fmt.Sprintf(f, rng.IntN(4))
				}
			}
			b := NewBuilder(new(Live))
			ref := &refNames{map[string]*Zone{}, map[string]*App{}, map[string]*Domain{}}
			var hosts []string
			for i := range 60 {
				for _, z := range zones {
					hosts = append(hosts, fmt.Sprintf("a%d.%s", i, z), fmt.Sprintf("A%d.%s.:443", i, strings.ToUpper(z)),
						fmt.Sprintf("A%d.%s", i, z), fmt.Sprintf("a%d_.%s", i, z), fmt.Sprintf("a%d.%s:443", i, z))
				}
				hosts = append(hosts, fmt.Sprintf("www.c%d.test", i), fmt.Sprintf("c%d.example", i), fmt.Sprintf("a%d", i))
				for _, f := range []string{"WWW.C%d.TEST", "www.c%d.test:443", "www.c%d.test.", "www.c%d_.test"} {
					hosts = append(hosts, fmt.Sprintf(f, i))
				}
			}
			hosts = append(hosts, "api.apps.test", "apps.test", "", "x.y.apps.test", "a1.apps.test")
			type snap struct {
				tbl *Table
				ref *refNames
			}
			var snaps []snap
			rebuilds := 0
			for step := range 4000 {
				b.mu.Lock()
				dead := b.n.dead
				b.mu.Unlock()
				replaced := false
				switch op := rng.IntN(100); {
				case op < 25:
					a := &App{ID: ids(60)}
					b.PutApp(a)
					ref.apps[a.ID] = a
				case op < 45:
					id := ids(60)
					b.DeleteApp(id)
					delete(ref.apps, id)
				case op < 70:
					d := &Domain{Domain: names(), App: ids(70), Verified: rng.IntN(3) > 0}
					b.PutDomain(d)
					ref.domains[d.Domain] = d
				case op < 90:
					name := names()
					b.DeleteDomain(name)
					delete(ref.domains, name)
				case op < 94:
					z := &Zone{Name: zones[rng.IntN(len(zones))]}
					b.PutZone(z, 0)
					ref.zones[z.Name] = z
				case op < 97:
					name := zones[rng.IntN(len(zones))]
					b.DeleteZone(name, 0)
					delete(ref.zones, name)
				case rng.IntN(10) > 0:
					z := &Zone{Name: zones[0]}
					b.PutZone(z, 0)
					ref.zones[z.Name] = z
				default:
					replaced = true
					var s State
					for _, z := range ref.zones {
						s.Zones = append(s.Zones, z)
					}
					for _, a := range ref.apps {
						s.Apps = append(s.Apps, a)
					}
					for _, d := range ref.domains {
						s.Domains = append(s.Domains, d)
					}
					b.Replace(s)
				}
				b.mu.Lock()
				if b.n.dead == 0 && b.n.apps.n > len(ref.apps)+70 {
					t.Fatalf("step %d: index holds %d app keys after a rebuild", step, b.n.apps.n)
				}
				if !replaced && dead > 0 && b.n.dead == 0 {
					rebuilds++
				}
				b.mu.Unlock()
				tbl := b.Live().Load()
				if step%10 == 0 {
					ref.check(t, tbl, hosts)
				}
				if step%500 == 0 {
					snaps = append(snaps, snap{tbl, ref.clone()})
				}
			}
			for _, s := range snaps {
				s.ref.check(t, s.tbl, hosts)
			}
			if rebuilds == 0 {
				t.Fatal("the index was never rebuilt: deletions not counted")
			}
			t.Logf("%d rebuilds", rebuilds)
		})
	}
}

// TestReadersDuringEdits reads snapshots while the builder derives new
// ones from them: under -race, a write into anything a published snapshot
// can read (its slots, the shared arena below its end, its entries) fails
// the test.
func TestReadersDuringEdits(t *testing.T) {
	b := NewBuilder(new(Live))
	b.Replace(State{Zones: []*Zone{{Name: "apps.test"}}})
	long := func(i int) string { return fmt.Sprintf("an-app-id-longer-than-sixteen-bytes-%d", i%50) }
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				tbl := b.Live().Load()
				m := tbl.Lookup(long(i) + ".apps.test")
				if m.Kind == KindApp && m.App.ID != long(i) {
					t.Errorf("Lookup(%s) = %s", long(i), m.App.ID)
					return
				}
				if m := tbl.Lookup(fmt.Sprintf("www.c%d.test", i%50)); m.Kind == KindApp && m.App.ID != long(i) {
					t.Errorf("www.c%d.test routes to %s", i%50, m.App.ID)
					return
				}
			}
		}()
	}
	for i := range 600 {
		switch i % 4 {
		case 0, 1:
			b.PutApp(&App{ID: long(i)})
		case 2:
			b.PutDomain(&Domain{Domain: fmt.Sprintf("www.c%d.test", i%50), App: long(i), Verified: true})
		default:
			b.DeleteApp(long(i))
			b.DeleteDomain(fmt.Sprintf("www.c%d.test", (i+7)%50))
		}
	}
	close(done)
	wg.Wait()
}
