package route

import (
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
)

// Builder is the single writer of a [Live] table. The store watcher calls
// the Put/Delete methods, discovery calls SetHost/DeleteHost, and each call
// publishes a new snapshot. Safe for concurrent use; calls are serialized.
type Builder struct {
	live *Live

	mu     sync.Mutex
	n      *names
	hosts  map[string]*Host
	held   int           // Hold calls not yet released
	unsent bool          // b.n changed since the last publish
	loaded chan struct{} // closed by the first Replace
	once   sync.Once
}

// NewBuilder returns a builder that publishes to live, starting empty.
func NewBuilder(live *Live) *Builder {
	e := emptyTable()
	// Each builder counts the versions of its apps and domains
	// (names.appsGen) on from a random point of its own, so that one
	// builder's versions do not repeat another's: a reader that keeps
	// names derived from one builder's table, then reads another's (the
	// store's Run started again on a new builder), derives them again.
	e.n.appsGen, e.n.domainsGen = rand.Uint64(), rand.Uint64()
	return &Builder{live: live, n: e.n, hosts: map[string]*Host{}, loaded: make(chan struct{})}
}

// Live returns the table the builder publishes to.
func (b *Builder) Live() *Live { return b.live }

// Loaded is closed once the first full state has been published by
// Replace: the store's initial load.
func (b *Builder) Loaded() <-chan struct{} { return b.loaded }

// State is a full copy of the store's routing state, for [Builder.Replace].
type State struct {
	Zones   []*Zone
	Apps    []*App
	Domains []*Domain
	Records []*Record
	// Revisions are the zones' store revisions; Replace takes the map.
	// nil: none, and every zone's serial is 0.
	Revisions Revisions
}

// Replace swaps every zone, app and domain at once: the initial load and
// the periodic resync. Hosts are left as they are.
func (b *Builder) Replace(s State) {
	n := &names{records: make(map[string]*Record, len(s.Records)), revs: s.Revisions}
	if n.revs == nil {
		n.revs = Revisions{}
	}
	zones := make(map[string]*Zone, len(s.Zones))
	for _, z := range s.Zones {
		zones[z.Name] = z
	}
	n.setZones(zones)
	for _, r := range s.Records {
		n.records[r.Key()] = r
	}
	n.buildIndex(s.Apps, s.Domains)
	b.mu.Lock()
	defer b.mu.Unlock()
	n.appsGen, n.domainsGen = b.n.appsGen+1, b.n.domainsGen+1
	b.n = n
	b.publishLocked(false)
	b.once.Do(func() { close(b.loaded) })
}

// buildIndex builds the app and domain index from scratch; for a
// duplicate id or name the last one wins.
func (n *names) buildIndex(apps []*App, domains []*Domain) {
	ab, db := 0, 0
	for _, a := range apps {
		ab += arenaFor(a.ID)
	}
	for _, d := range domains {
		db += arenaFor(d.Domain)
	}
	n.apps = newStrIndex[App](len(apps), ab)
	n.appVals = make([]*App, 0, len(apps))
	n.domains = newStrIndex[Domain](len(domains), db)
	for _, a := range apps {
		n.setApp(a)
	}
	n.zoneDomains = false
	for _, d := range domains {
		n.domains.set(d.Domain, d).aux = n.appEntry(d)
		n.zoneDomains = n.zoneDomains || n.inZone(d.Domain)
	}
	n.dead = 0
}

// setApp adds or replaces a. n.apps' slots and n.appVals must be n's own.
func (n *names) setApp(a *App) {
	s := n.apps.set(a.ID, a)
	if s.aux == noEntry {
		s.aux = uint32(len(n.appVals))
		n.appVals = append(n.appVals, nil)
	}
	n.appVals[s.aux] = a
}

// appEntry is the appVals entry a domain mapping routes to, added with a
// nil app if the app does not exist, or noEntry if d is not verified.
// n.apps' slots and n.appVals must be n's own if d's app may be new.
func (n *names) appEntry(d *Domain) uint32 {
	if !d.Verified {
		return noEntry
	}
	s := n.apps.entry(d.App, noEntry)
	if s.aux == noEntry {
		s.aux = uint32(len(n.appVals))
		n.appVals = append(n.appVals, nil)
	}
	return s.aux
}

// The parts of names an edit copies before it changes them, unless its
// copy owns them already (names.owned): once per publish, not per edit.
const (
	ownApps uint8 = 1 << iota
	ownDomains
	ownRecords
	ownRevs
)

// ownApps gives n its own app slots and entries.
func (n *names) ownApps() {
	if n.owned&ownApps != 0 {
		return
	}
	n.apps.cloneSlots()
	n.appVals = append(make([]*App, 0, len(n.appVals)+1), n.appVals...)
	n.owned |= ownApps
	n.appsGen++
}

// ownDomains gives n its own domain slots.
func (n *names) ownDomains() {
	if n.owned&ownDomains == 0 {
		n.domains.cloneSlots()
		n.owned |= ownDomains
		n.domainsGen++
	}
}

// ownRecords gives n its own record map.
func (n *names) ownRecords() {
	if n.owned&ownRecords == 0 {
		n.records = maps.Clone(n.records)
		n.owned |= ownRecords
	}
}

// PutApp adds or replaces an app.
func (b *Builder) PutApp(a *App) {
	b.editNames(func(n *names) {
		n.ownApps()
		n.setApp(a)
	})
}

// DeleteApp removes an app.
func (b *Builder) DeleteApp(id string) {
	b.editNames(func(n *names) {
		if s := n.apps.find(id); s != nil && s.v != nil {
			n.ownApps()
			s = n.apps.find(id)
			n.apps.clear(s)
			n.appVals[s.aux] = nil
			n.dead++
		}
	})
}

// PutZone adds or replaces a zone, written to the store at revision rev.
func (b *Builder) PutZone(z *Zone, rev uint64) {
	b.editNames(func(n *names) {
		had := n.zone(z.Name) != nil
		zones := maps.Clone(n.zones)
		zones[z.Name] = z
		n.setZones(zones)
		n.sawZone(z.Name, rev)
		if !n.zoneDomains && !had && n.zone(z.Name) != nil {
			// Only a new zone can have domains under it that zoneDomains
			// does not count yet: one scan of the domains, when a zone
			// is added. (Deleting a domain or a zone leaves zoneDomains
			// set: that costs only probes, until the next rebuild.)
			n.zoneDomains = n.domains.any(func(d string) bool {
				i := strings.IndexByte(d, '.')
				return i > 0 && d[i+1:] == z.Name
			})
		}
	})
}

// DeleteZone removes a zone, deleted from the store at revision rev.
func (b *Builder) DeleteZone(name string, rev uint64) {
	b.editNames(func(n *names) {
		zones := maps.Clone(n.zones)
		delete(zones, name)
		n.setZones(zones)
		n.sawZone(name, rev)
	})
}

// PutDomain adds or replaces a custom domain mapping.
func (b *Builder) PutDomain(d *Domain) {
	b.editNames(func(n *names) {
		if d.Verified && n.apps.find(d.App) == nil {
			n.ownApps()
		}
		aux := n.appEntry(d)
		n.ownDomains()
		n.domains.set(d.Domain, d).aux = aux
		n.zoneDomains = n.zoneDomains || n.inZone(d.Domain)
	})
}

// DeleteDomain removes a custom domain mapping.
func (b *Builder) DeleteDomain(name string) {
	b.editNames(func(n *names) {
		if s := n.domains.find(name); s != nil && s.v != nil {
			n.ownDomains()
			s = n.domains.find(name)
			s.aux = noEntry
			n.domains.clear(s)
			n.dead++
		}
	})
}

// PutRecord adds or replaces a DNS record set, written to the store at
// revision rev.
func (b *Builder) PutRecord(r *Record, rev uint64) {
	b.editNames(func(n *names) {
		n.ownRecords()
		n.records[r.Key()] = r
		n.sawRecord(r.Zone, rev)
	})
}

// DeleteRecord removes a DNS record set, deleted from the store at
// revision rev.
func (b *Builder) DeleteRecord(zone, name, typ string, rev uint64) {
	k := (&Record{Zone: zone, Name: name, Type: typ}).Key()
	b.editNames(func(n *names) {
		n.ownRecords()
		delete(n.records, k)
		n.sawRecord(zone, rev)
	})
}

// sawZone and sawRecord note a change in n's own copy of the revisions:
// the published tables hold the old one.
func (n *names) sawZone(zone string, rev uint64) {
	n.ownRevs()
	n.revs.SawZone(zone, rev)
}

func (n *names) sawRecord(zone string, rev uint64) {
	n.ownRevs()
	n.revs.SawRecord(zone, rev)
}

func (n *names) ownRevs() {
	if n.owned&ownRevs == 0 {
		n.revs = maps.Clone(n.revs)
		n.owned |= ownRevs
	}
}

// rebuildMin is how many deletions editNames lets pass before it may
// rebuild the index; a variable for the tests.
var rebuildMin = 1024

// editNames publishes the names f derives from a shallow copy of the
// current ones. f replaces only the part it changes with a copy (a zone
// change copies the zone map, an app change the app entries), so a host
// event copies no names at all and an app change costs a copy of the app
// entries, not of the whole store. Once as many apps and domains have been
// deleted as half of those left, the index is rebuilt without their keys.
// Under Hold the copy is published at the release, and the edits until
// then change it in place: a burst copies each part once.
func (b *Builder) editNames(f func(*names)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := *b.n
	f(&n)
	if n.dead > rebuildMin && n.dead > (n.apps.live+n.domains.live)/2 {
		n.buildIndex(n.apps.all(), n.domains.all())
	}
	b.n = &n
	if b.held > 0 {
		b.unsent = true
		return
	}
	b.publishLocked(false)
}

// Hold defers publishing the zone, app, domain and record edits made
// until release is called, which publishes them as one snapshot. The
// store's follower holds while it applies a burst of changes: each edit
// published on its own copies the part it changes (the app index of a
// million apps is ~50 MB), so a burst of N changes cost N copies; held,
// one. A host change meanwhile publishes what was edited so far, as any
// publish does. Readers see none of the held edits until then, so a hold
// must be short.
func (b *Builder) Hold() (release func()) {
	b.mu.Lock()
	b.held++
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.held--
			if b.held == 0 && b.unsent {
				b.publishLocked(false)
			}
		})
	}
}

// Unsent reports whether edits made under a Hold wait for its release
// to be published: until then readers see a table without them.
func (b *Builder) Unsent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unsent
}

// SetHost adds or replaces a host (by ID). A host whose Health is nil gets
// the Health of the host it replaces, or a new one.
func (b *Builder) SetHost(h *Host) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.Health == nil {
		if old := b.hosts[h.ID]; old != nil {
			h.Health = old.Health
		} else {
			h.Health = new(Health)
		}
	}
	b.hosts[h.ID] = h
	b.publishLocked(true)
}

// DeleteHost forgets a host.
func (b *Builder) DeleteHost(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.hosts[id]; !ok {
		return
	}
	delete(b.hosts, id)
	b.publishLocked(true)
}

// Host returns the current published host by id, or nil.
func (b *Builder) Host(id string) *Host {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hosts[id]
}

func (b *Builder) publishLocked(hostsChanged bool) {
	prev := b.live.Load()
	t := &Table{n: b.n, pools: prev.pools, hosts: prev.hosts}
	if hostsChanged || prev == empty {
		all := make([]*Host, 0, len(b.hosts))
		for _, h := range b.hosts {
			all = append(all, h)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
		pools := map[string][]*Host{}
		for _, h := range all {
			if !h.Routable() {
				continue
			}
			for _, a := range h.Apps {
				pools[a] = append(pools[a], h)
			}
		}
		t.pools, t.hosts = pools, all
	}
	b.live.Store(t)
	b.unsent = false
	if b.n.owned != 0 {
		// t shares every part of b.n now: the next edit copies again.
		n := *b.n
		n.owned = 0
		b.n = &n
	}
}
