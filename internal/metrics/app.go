package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// App is one app's request collectors, resolved once: recording a request
// through it hashes no label values and takes no lock (a CounterVec's
// WithLabelValues does both on every call). Get one with [Set.App]; it is
// safe for concurrent use.
//
// The children are looked up once and kept: [Set.ForgetApp] deletes the
// app's series, which detaches them, and then drops the App, so that the
// next request for the app gets a new App whose children are exported.
type App struct {
	id       string
	requests *prometheus.CounterVec
	duration prometheus.Observer
	counters atomic.Pointer[appCounter] // a short list: one per (class, method) seen
}

type appCounter struct {
	class, method string
	c             prometheus.Counter
	next          *appCounter
}

// App returns app's collectors, building them on first use. Entries are
// kept until [Set.ForgetApp] drops them with the app's series: the routing
// table's sweep (route.Forget) does, once the app is gone from the table.
func (s *Set) App(app string) *App {
	if v, ok := s.apps.Load(app); ok {
		return v.(*App)
	}
	a := &App{id: app, requests: s.Requests, duration: s.Duration.WithLabelValues(app)}
	v, _ := s.apps.LoadOrStore(app, a)
	return v.(*App)
}

// Request records one answered request: its status code (counted by
// class), method (folded by [Method]) and duration.
func (a *App) Request(code int, method string, d time.Duration) {
	a.counter(Class(code), Method(method)).Inc()
	a.duration.Observe(d.Seconds())
}

// counter returns the requests counter for (class, method). The list
// holds at most one entry per class and method pair (5 × 10); a lost race
// to add one only repeats a lookup that returns the same child.
func (a *App) counter(class, method string) prometheus.Counter {
	head := a.counters.Load()
	for n := head; n != nil; n = n.next {
		if n.class == class && n.method == method {
			return n.c
		}
	}
	c := a.requests.WithLabelValues(a.id, class, method)
	a.counters.CompareAndSwap(head, &appCounter{class: class, method: method, c: c, next: head})
	return c
}

// reserved are the app labels of requests that reached no app: no table
// ever holds them, so they are never offered to be forgotten.
func reserved(app string) bool {
	return app == AppUnknown || app == AppAPI || app == AppNone
}

// HeldApps calls f with each app id recorded and not forgotten since,
// the labels of requests that reached no app left out. It makes
// s a route.AppState.
func (s *Set) HeldApps(f func(id string) bool) {
	s.apps.Range(func(k, _ any) bool {
		if id := k.(string); !reserved(id) {
			return f(id)
		}
		return true
	})
}

// ForgetApp deletes app's series from the vectors labelled by app
// (requests, duration, upstream errors) and its cached [App]. The label
// values are bounded sets (classes, folded methods, reasons), so each is
// deleted by its full label values: a DeletePartialMatch would scan every
// series of every app, under the vector's lock, once per app forgotten.
//
// The series go before the App: a request that finishes meanwhile
// records into the old App, whose children the deletes detached (its
// counts are lost), or, once the App is gone, builds a new one from
// children made after the deletes, which are exported, and holds the app
// again for the sweep to forget later. The other order could leave an
// App built between the two steps, on detached children, cached: a
// request in that window for an app then put back would leave the app's
// series off /metrics. What this order can leave are the series such a
// request made after the deletes while it still got the old App (an
// upstream error, a class and method the App had not seen): a series or
// two, deleted with the rest if the app comes and goes again.
func (s *Set) ForgetApp(app string) {
	if reserved(app) {
		return
	}
	for _, c := range classes {
		for _, m := range methods {
			s.Requests.DeleteLabelValues(app, c, m)
		}
	}
	s.Duration.DeleteLabelValues(app)
	for _, r := range reasons {
		s.UpstreamErrors.DeleteLabelValues(app, r)
	}
	s.apps.Delete(app)
}
