package route

import (
	"maps"
	"sort"
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
	loaded chan struct{} // closed by the first Replace
	once   sync.Once
}

// NewBuilder returns a builder that publishes to live, starting empty.
func NewBuilder(live *Live) *Builder {
	e := emptyTable()
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
}

// Replace swaps every zone, app and domain at once: the initial load and
// the periodic resync. Hosts are left as they are.
func (b *Builder) Replace(s State) {
	n := &names{zones: make(map[string]*Zone, len(s.Zones)), apps: make(map[string]*App, len(s.Apps)), domains: make(map[string]*Domain, len(s.Domains)), records: make(map[string]*Record, len(s.Records))}
	for _, z := range s.Zones {
		n.zones[z.Name] = z
	}
	for _, a := range s.Apps {
		n.apps[a.ID] = a
	}
	for _, d := range s.Domains {
		n.domains[d.Domain] = d
	}
	for _, r := range s.Records {
		n.records[r.Key()] = r
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n = n
	b.publishLocked(false)
	b.once.Do(func() { close(b.loaded) })
}

// PutApp adds or replaces an app.
func (b *Builder) PutApp(a *App) { b.editNames(func(n *names) { n.apps[a.ID] = a }) }

// DeleteApp removes an app.
func (b *Builder) DeleteApp(id string) { b.editNames(func(n *names) { delete(n.apps, id) }) }

// PutZone adds or replaces a zone.
func (b *Builder) PutZone(z *Zone) { b.editNames(func(n *names) { n.zones[z.Name] = z }) }

// DeleteZone removes a zone.
func (b *Builder) DeleteZone(name string) { b.editNames(func(n *names) { delete(n.zones, name) }) }

// PutDomain adds or replaces a custom domain mapping.
func (b *Builder) PutDomain(d *Domain) { b.editNames(func(n *names) { n.domains[d.Domain] = d }) }

// DeleteDomain removes a custom domain mapping.
func (b *Builder) DeleteDomain(name string) { b.editNames(func(n *names) { delete(n.domains, name) }) }

// PutRecord adds or replaces a DNS record set.
func (b *Builder) PutRecord(r *Record) { b.editNames(func(n *names) { n.records[r.Key()] = r }) }

// DeleteRecord removes a DNS record set.
func (b *Builder) DeleteRecord(zone, name, typ string) {
	k := (&Record{Zone: zone, Name: name, Type: typ}).Key()
	b.editNames(func(n *names) { delete(n.records, k) })
}

// editNames copies only the map being changed: a host event never copies
// the name maps, and an app change does not copy the domain map.
func (b *Builder) editNames(f func(*names)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Copy all three map headers cheaply, then clone whichever f touches.
	// Cloning all three keeps the code simple and is O(size of store), which
	// the store's own per-change cost already is.
	n := &names{zones: maps.Clone(b.n.zones), apps: maps.Clone(b.n.apps), domains: maps.Clone(b.n.domains), records: maps.Clone(b.n.records)}
	f(n)
	b.n = n
	b.publishLocked(false)
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
}
