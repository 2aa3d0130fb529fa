package bus

import "time"

// SyncAlways reports what the embedded server says of its JetStream
// writes in its monitoring answer (/jsz's config.sync_always).
func (b *Bus) SyncAlways() (bool, error) {
	info, err := b.ns.Jsz(nil)
	if err != nil {
		return false, err
	}
	return info.Config.SyncAlways, nil
}

// SetWaitLogEvery shortens how often a waiting Start says so.
func (b *Bus) SetWaitLogEvery(d time.Duration) { b.waitLogEvery = d }

// SetAsyncLogEvery shortens how often one asynchronous error is logged.
func (b *Bus) SetAsyncLogEvery(d time.Duration) { b.async.every = d }

// SetCutOffTimes shortens LeaveCutOff's bounds: how long a server fails
// its probes before the connection leaves it, how often it may move, how
// often it probes and how long a probe may take.
func (b *Bus) SetCutOffTimes(after, every, probe, timeout time.Duration) {
	b.cutOff = cutOffTimes{after: after, every: every, probe: probe, probeFailing: probe, timeout: timeout}
}

// SetServerLogNow sets the embedded server log's clock, which paces its
// lines about clients. Call it before Start.
func (b *Bus) SetServerLogNow(now func() time.Time) { b.srvLog.now = now }

// The bound on the embedded server's lines about clients.
const (
	ClientLogBurst = clientLogBurst
	ClientLogEvery = clientLogEvery
)
