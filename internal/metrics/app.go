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
// The children are looked up once and kept, so deleting label values
// from the Set's vectors (nothing in gatehouse does) would detach them.
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
// kept for the Set's life: one small struct per app label ever recorded,
// as the vectors themselves keep a series per app.
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
