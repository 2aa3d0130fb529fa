package store

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configure a [Store].
type Options struct {
	// Replicas is the number of JetStream replicas of each bucket: 3 on an
	// external NATS cluster. A bucket is created with it (0 means 1); an
	// existing bucket with fewer is raised to it, and one with more (an
	// operator's R5) keeps its count: 0 leaves every count as it is.
	// Whatever it is, Open gives an existing bucket what the gateway needs
	// of it besides (its republish, rollups, the locks bucket's per-message
	// TTLs) and leaves the rest of its settings alone.
	Replicas int
	// Resync is how often Run checks the table against the store, the
	// safety net under the watchers: it compares each routing bucket's
	// stream (its last sequence, subject count and creation time) with
	// what the table has applied, and reloads every bucket in full and
	// replaces the table only when they differ (compare in run.go). A
	// check that fails is tried again shortly; checks that fail for a
	// whole Resync end the watch, which Run retries. WatchHostKeys checks
	// as often that its bucket was not made again. 0 means 30 s.
	Resync time.Duration
	// FullResync is how often Run reloads every bucket in full whatever
	// the checks found: the net under the checks, for a change the table
	// received and misapplied, which no count shows. 0 means 10 min.
	FullResync time.Duration
	// OnResync, if not nil, is called with the reason each time Run has
	// published a full load: "start" (the first), "retry" (after a failed
	// watch, or checks that failed for a whole Resync), "interval"
	// (FullResync), or what a check found: "stalled", "keys", "swept" or
	// "recreated" (compare in run.go). It is called from Run's goroutine
	// and must not block.
	OnResync func(reason string)
	// LockTTL is how long an ACME lock outlives a holder that stopped
	// refreshing it (crashed or cut off); a live holder refreshes it every
	// LockTTL/3. 0 means 60 s. At least 2 s.
	LockTTL time.Duration
	// LoadTimeout bounds one full load of every bucket (the initial one
	// and each retry); past it the attempt fails and is retried with the
	// table untouched. It does not bound the watchers that follow the
	// load. 0 means 15 s.
	LoadTimeout time.Duration
	// MarkerAge is how long a delete marker stays in a bucket before Run
	// sweeps it away (see sweep.go); 0 means 1 h. A gateway cut off for
	// longer still drops a deleted key at its next resync, which reads
	// live keys only.
	MarkerAge time.Duration
	// SweepEvery is how often Run looks for markers older than MarkerAge,
	// the first time once its first load is done. 0 means 10 min.
	SweepEvery time.Duration
	// Logger receives watch errors and skipped bad values. Nil discards.
	Logger *slog.Logger
}

const (
	defaultResync = 30 * time.Second
	// A full load of 100,000 apps costs about 1.3 s of CPU (the gateway
	// and the NATS server together, BenchmarkResync): every 30 s that
	// was 4 % of a core on every gateway, for ever, at 1,000,000 apps
	// about half a core. Every 10 min it is a twentieth of that.
	defaultFullResync = 10 * time.Minute
	defaultLockTTL    = 60 * time.Second
	minLockTTL        = 2 * time.Second
	// A marker lives long enough for every connected watcher to see it,
	// and for a host key watch resuming after a short outage to report
	// it; discovery's periodic check (10 min) covers a longer outage.
	defaultMarkerAge  = time.Hour
	defaultSweepEvery = 10 * time.Minute
)

func (o *Options) validate() error {
	switch {
	case o.Replicas < 0 || o.Replicas > 5:
		return fmt.Errorf("store: replicas must be 0 to 5, got %d", o.Replicas)
	case o.LoadTimeout < 0:
		return fmt.Errorf("store: load timeout must not be negative, got %s", o.LoadTimeout)
	case o.Resync < 0:
		return fmt.Errorf("store: resync must not be negative, got %s", o.Resync)
	case o.FullResync < 0:
		return fmt.Errorf("store: full resync must not be negative, got %s", o.FullResync)
	case o.MarkerAge < 0:
		return fmt.Errorf("store: marker age must not be negative, got %s", o.MarkerAge)
	case o.SweepEvery < 0:
		return fmt.Errorf("store: sweep interval must not be negative, got %s", o.SweepEvery)
	case o.LockTTL < 0 || (o.LockTTL > 0 && o.LockTTL < minLockTTL):
		return fmt.Errorf("store: lock ttl must be at least %s, got %s", minLockTTL, o.LockTTL)
	}
	return nil
}

func (o *Options) resync() time.Duration {
	if o.Resync == 0 {
		return defaultResync
	}
	return o.Resync
}

func (o *Options) fullResync() time.Duration {
	if o.FullResync == 0 {
		return defaultFullResync
	}
	return o.FullResync
}

func (o *Options) loadTimeout() time.Duration {
	if o.LoadTimeout == 0 {
		return defaultLoadTimeout
	}
	return o.LoadTimeout
}

func (o *Options) lockTTL() time.Duration {
	if o.LockTTL == 0 {
		return defaultLockTTL
	}
	return o.LockTTL
}

func (o *Options) markerAge() time.Duration {
	if o.MarkerAge == 0 {
		return defaultMarkerAge
	}
	return o.MarkerAge
}

func (o *Options) sweepEvery() time.Duration {
	if o.SweepEvery == 0 {
		return defaultSweepEvery
	}
	return o.SweepEvery
}

func (o *Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}
