package proxy

import (
	"sync"
	"time"
)

// failLog bounds the "proxy: upstream failed" warning: an app with no
// routable host, or a host that is down, fails every request, and a line
// each would let any client fill the log at request rate, at a level
// `log.level: warn` cannot silence. Each (app, status) logs at once and
// then at most once per failLogEvery, saying how many lines it left out;
// the access log still has every request.
type failLog struct {
	mu   sync.Mutex
	last map[failKey]*failEntry
}

const (
	failLogEvery = 10 * time.Second
	// failLogKeys bounds the map (an app id is the operator's, but a
	// flood of apps failing at once must not grow it without end): past
	// it the map starts over, which at worst repeats a line early.
	failLogKeys = 4096
)

type failKey struct {
	app    string
	status int
}

type failEntry struct {
	at      time.Time
	skipped int
}

// allow reports whether the failure of k at now is logged, and how many
// of k's were left out since its last line.
func (f *failLog) allow(k failKey, now time.Time) (bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.last[k]
	if e != nil && now.Sub(e.at) < failLogEvery {
		e.skipped++
		return false, 0
	}
	if e == nil {
		if f.last == nil || len(f.last) >= failLogKeys {
			f.last = make(map[failKey]*failEntry)
		}
		e = &failEntry{}
		f.last[k] = e
	}
	skipped := e.skipped
	e.at, e.skipped = now, 0
	return true, skipped
}
