package discovery

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Anyone who reaches the embedded bus may publish on the hosts subjects
// without credentials, so a warning per dropped message would let them
// fill the gateway's log at bus speed. Each reason may log dropLogBurst
// lines at once and then one more every dropLogEvery (6 s, so 10 a
// minute); what it holds back is tallied and reported by one summary line
// at most every dropSummaryEvery. The counter still counts every message.
const (
	dropLogBurst     = 10
	dropLogRefill    = time.Minute // an empty bucket's time to fill up again
	dropSummaryEvery = time.Minute

	dropLogEvery = dropLogRefill / dropLogBurst // one token
)

// Summaries of the lines held back, one per dropLog.
const (
	dropsNotLogged    = "discovery: dropped bus messages not logged"
	failuresNotLogged = "discovery: host verification failures not logged"
	healthNotLogged   = "discovery: host health changes not logged"
)

// dropLog writes the warnings for dropped bus messages (or for other
// events a bus client can cause at will, such as failed verifications)
// through a token bucket per reason. Its methods may be called
// concurrently.
type dropLog struct {
	logger     *slog.Logger
	summaryMsg string // dropsNotLogged, failuresNotLogged or healthNotLogged

	mu      sync.Mutex
	buckets map[string]*dropBucket // by reason, a fixed set
	from    time.Time              // first line held back since the last summary; zero if none
	summary time.Time              // when the last summary was written
}

type dropBucket struct {
	tokens     int
	at         time.Time // tokens are counted up to here; a part token carries over
	suppressed int64     // lines held back since the last summary
}

func newDropLog(l *slog.Logger, summaryMsg string) *dropLog {
	return &dropLog{logger: l, summaryMsg: summaryMsg, buckets: map[string]*dropBucket{}}
}

// warn logs msg and args as a warning unless reason's bucket is empty, in
// which case the line is only tallied for the next summary.
func (l *dropLog) warn(now time.Time, reason, msg string, args ...any) {
	if l.allow(now, reason) {
		l.logger.Warn(msg, args...)
	}
}

// info is warn at level info.
func (l *dropLog) info(now time.Time, reason, msg string, args ...any) {
	if l.allow(now, reason) {
		l.logger.Info(msg, args...)
	}
}

func (l *dropLog) allow(now time.Time, reason string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[reason]
	if b == nil {
		b = &dropBucket{tokens: dropLogBurst, at: now}
		l.buckets[reason] = b
	}
	if now.Before(b.at) {
		// The clock was set back: refill from here rather than wait for
		// it to catch up with the old reading.
		b.at = now
	}
	// Whole tokens only, the remainder carried in at, so the rate is exact.
	if n := int(now.Sub(b.at) / dropLogEvery); n > 0 {
		b.tokens += n
		b.at = b.at.Add(time.Duration(n) * dropLogEvery)
		if b.tokens >= dropLogBurst {
			b.tokens, b.at = dropLogBurst, now // a full bucket saves up nothing
		}
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	if l.from.IsZero() {
		l.from = now
	}
	b.suppressed++
	return false
}

// summarize writes one line with how many lines each reason held back
// since the last summary, if any did and the last summary is at least
// dropSummaryEvery old. The sweeper calls it, so a flood that stops is
// still reported; the first summary after a quiet spell comes at its next
// tick.
func (l *dropLog) summarize(now time.Time) {
	l.mu.Lock()
	// A clock set back (since < 0) must not hold summaries back until it
	// catches up.
	if since := now.Sub(l.summary); l.from.IsZero() || (!l.summary.IsZero() && since >= 0 && since < dropSummaryEvery) {
		l.mu.Unlock()
		return
	}
	var counts []any
	for _, r := range slices.Sorted(maps.Keys(l.buckets)) {
		if b := l.buckets[r]; b.suppressed > 0 {
			counts = append(counts, slog.Int64(r, b.suppressed))
			b.suppressed = 0
		}
	}
	from := l.from
	l.from, l.summary = time.Time{}, now
	l.mu.Unlock()
	l.logger.Warn(l.summaryMsg, slog.Group("suppressed", counts...), "since", from)
}
