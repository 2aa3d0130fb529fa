package route

import (
	"sort"
	"strings"
	"sync/atomic"
)

// Kind says what a name reached.
type Kind uint8

const (
	KindUnknown Kind = iota // no zone app, no verified domain: 404
	KindApp                 // an app, through {app}.{zone} or a custom domain
	KindAPI                 // api.{zone}: the gateway's own API
)

// Match is the result of a table lookup.
type Match struct {
	Kind Kind
	App  *App  // set for KindApp
	Zone *Zone // the zone the name is under; nil for a custom domain
	Name string
}

// names is the part of a table that changes with the store: zones, apps
// and domains. Host churn does not copy it, and a change copies only the
// part it changes.
type names struct {
	zones map[string]*Zone
	// cleanZones is the zones whose names are clean names, the ones
	// Lookup finds (zones itself when all are); zoneList is the same as a
	// slice while there are few (and nil otherwise): Lookup scans it
	// rather than hashing the name once more.
	cleanZones map[string]*Zone
	zoneList   []*Zone
	records    map[string]*Record // by Record.Key
	revs       Revisions          // by zone name
	// apps holds the apps by id; a slot's aux is the app's entry in
	// appVals, which custom domains route through.
	apps    strIndex[App]
	appVals []*App
	// domains holds every mapping, verified or not, by name. A slot's aux
	// is the appVals entry of the mapping's app if the mapping is
	// verified, else noEntry, so that Lookup resolves a custom domain to
	// its app with one probe. A verified mapping to an app that does not
	// exist yet holds an entry with a nil app, which PutApp fills.
	domains strIndex[Domain]
	// zoneDomains is false only while no domain is one label under a zone
	// Lookup finds: then a name under a zone that is not an app is not a
	// domain either, and Lookup does not probe for it (the probe is a
	// cache miss on a big table, and such names are what a scan sends).
	zoneDomains bool
	dead        int // apps and domains deleted since the index was built
	// appsGen and domainsGen change whenever the set of apps or of
	// domains may have: a copy that owns its app (domain) slots has one
	// its own, and one builder's do not repeat another's (NewBuilder). A
	// reader that keeps something derived from them (a sorted list of
	// names) knows by these when to derive it again.
	appsGen, domainsGen uint64
	// owned is the parts (ownApps, ...) of this copy that no published
	// table shares yet, which an edit may change in place: the builder's
	// working copy between two publishes. Readers never look at it.
	owned uint8
}

// Table is an immutable routing snapshot. A nil *Table is not valid; use
// [Live.Load], which never returns nil.
type Table struct {
	n     *names
	pools map[string][]*Host // app id -> routable hosts, sorted by id
	hosts []*Host            // every known host in any state, sorted by id
}

func emptyTable() *Table {
	return &Table{n: &names{zones: map[string]*Zone{}, records: map[string]*Record{}, revs: Revisions{}}, pools: map[string][]*Host{}}
}

// Lookup routes a host name (a Host header or SNI value, normalized here).
// It allocates nothing for a clean name.
//
// A host is first looked up as it came: every name it can match there is
// clean (zones, app ids and domains that are not clean names are never
// matched, see findName), so a match is the answer normalizing would have
// led to, and a request for a known name is not normalized at all. Only
// a host that matches nothing as it came is normalized, and looked up
// again if that changed it.
func (t *Table) Lookup(host string) Match {
	n := t.n
	if len(host) <= maxName {
		if m, ok := n.lookup(host); ok {
			return m
		}
	}
	name, ok := NormalizeHost(host)
	if !ok {
		return Match{}
	}
	if name != host {
		if m, ok := n.lookup(name); ok {
			return m
		}
	}
	return Match{Name: name}
}

// maxName is the longest clean name.
const maxName = 253

// lookup routes name, unless it matches nothing. A match tells that name
// is clean, whatever it was: what it matched is.
func (n *names) lookup(name string) (Match, bool) {
	if i := strings.IndexByte(name, '.'); i > 0 {
		if z := n.zone(name[i+1:]); z != nil {
			label := name[:i]
			if label == ReservedLabel {
				return Match{Kind: KindAPI, Zone: z, Name: name}, true
			}
			if s := n.apps.findName(label); s != nil && s.v != nil {
				return Match{Kind: KindApp, App: s.v, Zone: z, Name: name}, true
			}
			// Not an app label: a verified custom domain may still live
			// under a zone the gateway serves. The API refuses a zone over
			// a mapping and a mapping inside a zone, but a store written
			// before that, or a race of the two PUTs, can hold one.
			if !n.zoneDomains {
				return Match{}, false
			}
		}
	}
	if s := n.domains.findName(name); s != nil && s.aux != noEntry {
		if a := n.appVals[s.aux]; a != nil {
			return Match{Kind: KindApp, App: a, Name: name}, true
		}
	}
	return Match{}, false
}

// inZone reports whether domain is one label under a zone Lookup finds.
func (n *names) inZone(domain string) bool {
	i := strings.IndexByte(domain, '.')
	return i > 0 && n.zone(domain[i+1:]) != nil
}

// maxZoneList is the most zones Lookup finds by a scan.
const maxZoneList = 8

// zone returns the zone named name if that is a clean name, else nil.
func (n *names) zone(name string) *Zone {
	if n.zoneList == nil {
		return n.cleanZones[name]
	}
	for _, z := range n.zoneList {
		if len(z.Name) == len(name) && z.Name == name {
			return z
		}
	}
	return nil
}

// setZones sets zones, and the zones Lookup finds: those whose names are
// clean, as a list while there are few.
func (n *names) setZones(zones map[string]*Zone) {
	n.zones, n.cleanZones, n.zoneList = zones, zones, nil
	for name := range zones {
		if !clean(name) {
			n.cleanZones = make(map[string]*Zone, len(zones))
			for name, z := range zones {
				if clean(name) {
					n.cleanZones[name] = z
				}
			}
			break
		}
	}
	if len(n.cleanZones) <= maxZoneList {
		n.zoneList = make([]*Zone, 0, len(n.cleanZones))
		for _, z := range n.cleanZones {
			n.zoneList = append(n.zoneList, z)
		}
	}
}

// App returns an app by id, or nil.
func (t *Table) App(id string) *App { return t.n.apps.get(id) }

// Zone returns a zone by name, or nil.
func (t *Table) Zone(name string) *Zone { return t.n.zones[name] }

// Domain returns a custom domain mapping (verified or not), or nil.
func (t *Table) Domain(name string) *Domain { return t.n.domains.get(name) }

// Zones returns every zone, sorted by name.
func (t *Table) Zones() []*Zone {
	out := make([]*Zone, 0, len(t.n.zones))
	for _, z := range t.n.zones {
		out = append(out, z)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Serial returns the SOA serial of a zone: its [Revision.Serial], 0 for a
// zone the store has not told the builder the revisions of.
func (t *Table) Serial(zone string) uint32 { return t.n.revs[zone].Serial() }

// Records returns the record sets of a zone, sorted by key.
func (t *Table) Records(zone string) []*Record {
	var out []*Record
	for _, r := range t.n.records {
		if r.Zone == zone {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Domains returns every custom domain mapping, sorted by name.
func (t *Table) Domains() []*Domain {
	out := t.n.domains.all()
	sort.Slice(out, func(i, j int) bool { return out[i].Domain < out[j].Domain })
	return out
}

// DomainsOf returns the names of the custom domain mappings, verified or
// not, that name app, in no order. It reads every mapping once and
// allocates only the answer: some 60 ms at a million mappings
// (BenchmarkDomainsOf), rare control calls only. An index by app would
// answer at once but cost every table tens of MB at a million mappings,
// and each edit a copy-on-write step of its own.
func (t *Table) DomainsOf(app string) []string {
	var out []string
	slots := t.n.domains.slots
	for i := range slots {
		if d := slots[i].v; d != nil && d.App == app {
			out = append(out, d.Domain)
		}
	}
	return out
}

// AppsVersion changes whenever the apps may have changed since a table
// that gave another; tables that give the same one hold the same apps.
func (t *Table) AppsVersion() uint64 { return t.n.appsGen }

// DomainsVersion is AppsVersion for the custom domain mappings.
func (t *Table) DomainsVersion() uint64 { return t.n.domainsGen }

// DomainNames returns the name of every custom domain mapping, sorted.
func (t *Table) DomainNames() []string {
	return t.n.domains.sortedNames(func(d *Domain) string { return d.Domain })
}

// AppIDs returns every app id, sorted.
func (t *Table) AppIDs() []string {
	return t.n.apps.sortedNames(func(a *App) string { return a.ID })
}

// Apps returns the number of apps.
func (t *Table) Apps() int { return t.n.apps.live }

// Pool returns the routable hosts of an app, sorted by id. The caller must
// not modify the slice.
func (t *Table) Pool(app string) []*Host { return t.pools[app] }

// Hosts returns every known host in any state, sorted by id. The caller must
// not modify the slice.
func (t *Table) Hosts() []*Host { return t.hosts }

// HasHosts reports whether any host, routable or not, claims app: it tells
// "no host exists" (503) from "hosts exist but none is reachable" (502).
// A provisional host does not count: its claim is unproven until it
// verifies, and anyone on the bus may announce one for any app. Nor does
// a draining one: it has left (a signed leave), and only a new run that
// passes a challenge brings it back; kept until host_ttl for the requests
// it still finishes, it made its app a 502 "no healthy host" until then
// rather than the 503 of an app whose hosts are gone.
func (t *Table) HasHosts(app string) bool {
	for _, h := range t.hosts {
		if h.State == HostProvisional || h.State == HostDraining {
			continue
		}
		for _, a := range h.Apps {
			if a == app {
				return true
			}
		}
	}
	return false
}

// Live holds the current table. The zero value is ready and serves an empty
// table. Load and Store may be called concurrently.
type Live struct{ cur atomic.Pointer[Table] }

var empty = emptyTable()

// Load returns the current table; never nil.
func (l *Live) Load() *Table {
	if t := l.cur.Load(); t != nil {
		return t
	}
	return empty
}

// Store publishes t.
func (l *Live) Store(t *Table) { l.cur.Store(t) }
