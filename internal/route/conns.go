package route

import (
	"context"
	"io"
	"sort"
	"sync"
	"time"
)

// Conns holds the long-lived connections open to each app and host that
// outlive the table they were routed by: passthrough pipes and upgraded
// (101) connections. A request ends with its table; these can run for
// hours, so a table that takes away their app's or host's right to
// traffic (see [Table.Cuts]) has them closed by [Conns.Cut], within a
// sweep period of the change.
//
// Opening and closing a connection costs a lock, a map write per key and
// one small allocation (Add, Release), nothing per byte. Safe for
// concurrent use; the zero value is not ready, use [NewConns].
type Conns struct {
	live *Live

	mu sync.Mutex
	// apps and hosts list the connections per key, linked through the
	// Conns themselves: a key's first connection costs a map entry, not
	// a set of its own.
	apps, hosts map[string]connList
}

type connList struct {
	head *Conn
	n    int
}

// Conn is one connection held in a [Conns].
type Conn struct {
	s         *Conns
	app, host string
	c         io.Closer
	// Links in the app's list and in the host's; guarded by s.mu.
	appPrev, appNext, hostPrev, hostNext *Conn
}

// NewConns returns a Conns whose connections the tables of live may cut.
func NewConns(live *Live) *Conns {
	return &Conns{live: live, apps: map[string]connList{}, hosts: map[string]connList{}}
}

// Add holds a connection open to app through host ("" when no host of
// this gateway's serves it: a connection forwarded to a peer cluster).
// Cut ends it with c.Close, which may be called from another goroutine
// while the connection is in use, and at most once. Add reports false,
// holding nothing, when the current table already cuts app or host: the
// table the connection was routed by may have been replaced while it was
// set up, after the sweep of the new one. The caller then closes it
// itself. Each held connection must be released when it ends.
func (s *Conns) Add(app, host string, c io.Closer) (*Conn, bool) {
	h := &Conn{s: s, app: app, host: host, c: c}
	s.mu.Lock()
	s.link(h)
	s.mu.Unlock()
	// Checked after the add: a table published since the caller routed
	// is either seen here or swept after the add, which then finds h.
	if cut := s.live.Load().Cuts(app, host); cut != "" {
		h.Release()
		return nil, false
	}
	return h, true
}

// Release lets go of c (nil is a no-op). It is safe to call after Cut
// closed c, and more than once.
func (c *Conn) Release() {
	if c == nil {
		return
	}
	c.s.mu.Lock()
	c.s.unlink(c)
	c.s.mu.Unlock()
}

func (s *Conns) link(c *Conn) {
	l := s.apps[c.app]
	c.appNext = l.head
	if l.head != nil {
		l.head.appPrev = c
	}
	s.apps[c.app] = connList{head: c, n: l.n + 1}
	if c.host == "" {
		return
	}
	l = s.hosts[c.host]
	c.hostNext = l.head
	if l.head != nil {
		l.head.hostPrev = c
	}
	s.hosts[c.host] = connList{head: c, n: l.n + 1}
}

// unlink takes c out of its lists; one already out is left alone.
func (s *Conns) unlink(c *Conn) {
	l, ok := s.apps[c.app]
	if !ok || (c.appPrev == nil && l.head != c) {
		return // not linked
	}
	if c.appPrev != nil {
		c.appPrev.appNext = c.appNext
	} else {
		l.head = c.appNext
	}
	if c.appNext != nil {
		c.appNext.appPrev = c.appPrev
	}
	c.appPrev, c.appNext = nil, nil
	if l.n--; l.n == 0 {
		delete(s.apps, c.app) // an app's entry goes with its last connection
	} else {
		s.apps[c.app] = l
	}
	if c.host == "" {
		return
	}
	l = s.hosts[c.host]
	if c.hostPrev != nil {
		c.hostPrev.hostNext = c.hostNext
	} else {
		l.head = c.hostNext
	}
	if c.hostNext != nil {
		c.hostNext.hostPrev = c.hostPrev
	}
	c.hostPrev, c.hostNext = nil, nil
	if l.n--; l.n == 0 {
		delete(s.hosts, c.host)
	} else {
		s.hosts[c.host] = l
	}
}

// Cut is what one sweep closed for one app or host.
type Cut struct {
	App  string // the app whose connections were closed, or ""
	Host string // the host whose connections were closed, or ""
	// Why is the reason [Table.Cuts] gave: an app's status (suspended,
	// retired), "deleted" or "revoked".
	Why string
	N   int // connections closed
}

// Cut closes every held connection whose app or host t cuts, and returns
// one Cut per app and host (the apps' first, each sorted by id). The work
// is a table lookup per app and host that holds connections, under the
// lock (some 50 ns each: half a millisecond for 10,000 apps, at most once
// per CutEvery); the connections are closed outside it.
func (s *Conns) Cut(t *Table) []Cut {
	var cuts []Cut
	var doomed []*Conn
	s.mu.Lock()
	for app, l := range s.apps {
		if why := t.cutsApp(app); why != "" {
			cuts = append(cuts, Cut{App: app, Why: why, N: l.n})
			for c := l.head; c != nil; c = c.appNext {
				doomed = append(doomed, c)
			}
		}
	}
	for host, l := range s.hosts {
		if why := t.cutsHost(host); why != "" {
			n := 0
			for c := l.head; c != nil; c = c.hostNext {
				if t.cutsApp(c.app) == "" { // else counted with its app
					doomed = append(doomed, c)
					n++
				}
			}
			if n > 0 {
				cuts = append(cuts, Cut{Host: host, Why: why, N: n})
			}
		}
	}
	for _, c := range doomed {
		s.unlink(c)
	}
	s.mu.Unlock()
	for _, c := range doomed {
		_ = c.c.Close()
	}
	sort.Slice(cuts, func(i, j int) bool {
		a, b := cuts[i], cuts[j]
		if (a.App == "") != (b.App == "") {
			return a.App != "" // apps first
		}
		return a.App+"\x00"+a.Host < b.App+"\x00"+b.Host
	})
	return cuts
}

// Len returns how many connections are held.
func (s *Conns) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.apps {
		n += l.n
	}
	return n
}

// CutEvery is how often [Conns.Run] looks for a new table.
const CutEvery = 250 * time.Millisecond

// Run cuts, on each table live publishes, what it cuts (looking every
// every, 0: CutEvery), and tells report of each cut, until ctx ends.
func (s *Conns) Run(ctx context.Context, every time.Duration, report func(Cut)) error {
	if every <= 0 {
		every = CutEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last *Table // the first tick sweeps whatever table is current
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		t := s.live.Load()
		if t == last {
			continue
		}
		last = t
		for _, c := range s.Cut(t) {
			report(c)
		}
	}
}

// Cuts reports why t ends the connections open to app through host ("" for
// none, or for a connection forwarded to a peer cluster), or "" when they
// may carry on: see cutsApp and cutsHost.
func (t *Table) Cuts(app, host string) string {
	if why := t.cutsApp(app); why != "" {
		return why
	}
	if host == "" {
		return ""
	}
	return t.cutsHost(host)
}

// cutsApp reports why t ends the connections open to app: it is
// suspended or retired (its status), or deleted. An app that serves,
// whatever else changed in it, keeps them.
func (t *Table) cutsApp(app string) string {
	a := t.App(app)
	switch {
	case a == nil:
		return "deleted"
	case a.Status != StatusActive:
		return string(a.Status)
	}
	return ""
}

// cutsHost reports why t ends the connections open to a host: its
// enrolment no longer allows it ("revoked": deleted, another key
// enrolled, or its apps taken away). A draining host keeps them, that is
// its drain, and so does an unhealthy one, or one gone from the table
// after host_ttl without a heartbeat: missed heartbeats say the bus lost
// the host (or that it left and stopped), not that the pipe has, and a
// host still serving its pipes behind a broken bus link keeps them, as
// before the table dropped it.
func (t *Table) cutsHost(id string) string {
	hosts := t.hosts
	i := sort.Search(len(hosts), func(i int) bool { return hosts[i].ID >= id })
	if i < len(hosts) && hosts[i].ID == id && hosts[i].Refused {
		return "revoked"
	}
	return ""
}
