package limit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Quota is a budget: Limit units per sliding Window.
type Quota struct {
	Limit  int
	Window time.Duration
}

// Validate reports a quota that cannot be enforced.
func (q Quota) Validate() error {
	if q.Limit <= 0 {
		return fmt.Errorf("limit: limit must be positive, got %d", q.Limit)
	}
	if q.Window < time.Millisecond || q.Window > 24*time.Hour {
		return fmt.Errorf("limit: window must be between 1ms and 24h, got %s", q.Window)
	}
	return nil
}

// Result is the outcome of one charge, with what the rate-limit response
// fields need.
type Result struct {
	Allowed bool
	Limit   int // the quota's limit
	// Remaining is how many more units fit now, after this charge.
	Remaining int
	// Reset is how long until one more unit fits: zero while Remaining > 0.
	Reset time.Duration
	// RetryAfter is how long until this charge would fit; zero when allowed.
	RetryAfter time.Duration
}

// WindowOptions configures a [Window].
type WindowOptions struct {
	// MaxKeys bounds the keys held (LRU eviction). Zero means 100,000;
	// negative is an error.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Window is a sliding-window limiter over a bounded population of keys
// (weighted two-window counter; see the package doc). Safe for concurrent
// use.
type Window struct {
	now func() time.Time
	t   *table[counter]
}

// counter is one key's state: 24 bytes.
type counter struct {
	start  int64  // unix nanos at which the current fixed window began
	length int64  // window length in nanos; a change of quota starts over
	prev   uint32 // units charged in the window before start
	cur    uint32 // units charged since start
}

// DefaultMaxKeys is the key bound when WindowOptions.MaxKeys is zero.
const DefaultMaxKeys = 100_000

// NewWindow returns an empty limiter.
func NewWindow(o WindowOptions) (*Window, error) {
	if o.MaxKeys < 0 {
		return nil, fmt.Errorf("limit: max keys must not be negative, got %d", o.MaxKeys)
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Window{now: o.Now, t: newTable[counter](o.MaxKeys)}, nil
}

// ErrQuota is returned by Charge for a quota that fails Validate.
var ErrQuota = errors.New("limit: invalid quota")

// Charge charges n units to k under q, atomically: either all n are
// admitted or none. A charge with n ≤ 0 only reports the state.
func (w *Window) Charge(k Key, n int, q Quota) (Result, error) {
	if q.Limit <= 0 || q.Window <= 0 {
		return Result{}, fmt.Errorf("%w: %d per %s", ErrQuota, q.Limit, q.Window)
	}
	now := w.now().UnixNano()
	return with(w.t, k, nil, func(c *counter, _ bool) Result {
		return c.charge(now, n, q)
	}), nil
}

// Len returns the number of keys held.
func (w *Window) Len() int { return w.t.len() }

// charge is the whole algorithm; c is locked.
func (c *counter) charge(now int64, n int, q Quota) Result {
	length := int64(q.Window)
	c.advance(now, length)
	elapsed := now - c.start
	// weight of the previous window still inside the sliding window
	carried := float64(c.prev) * float64(length-elapsed) / float64(length)
	limit := float64(q.Limit)
	r := Result{Limit: q.Limit}
	if n < 0 {
		n = 0
	}
	if carried+float64(c.cur)+float64(n) <= limit && uint64(c.cur)+uint64(n) <= math.MaxUint32 {
		c.cur += uint32(n)
		r.Allowed = true
	} else {
		r.RetryAfter = c.until(now, n, q)
	}
	r.Remaining = int(math.Floor(limit - carried - float64(c.cur)))
	if r.Remaining < 0 {
		r.Remaining = 0
	}
	if r.Remaining == 0 {
		r.Reset = c.until(now, 1, q)
	}
	return r
}

// advance moves c's fixed windows forward to the one holding now.
func (c *counter) advance(now, length int64) {
	start := now - now%length
	switch {
	case c.length != length:
		*c = counter{start: start, length: length}
	case start == c.start:
	case start == c.start+length:
		c.prev, c.cur, c.start = c.cur, 0, start
	case start > c.start:
		c.prev, c.cur, c.start = 0, 0, start
	}
	// start < c.start: the clock went back; keep counting in c's window.
}

// until returns how long from now until n more units fit, given that no
// other charge happens meanwhile.
func (c *counter) until(now int64, n int, q Quota) time.Duration {
	if n > q.Limit {
		return q.Window // never fits; say "a window" rather than forever
	}
	length := int64(q.Window)
	elapsed := now - c.start
	free := float64(q.Limit - n)
	// Inside the current window the carried weight prev×(length−e)/length
	// shrinks; n fits once it is ≤ free − cur.
	if room := free - float64(c.cur); room >= 0 {
		if c.prev == 0 || float64(c.prev)*float64(length-elapsed)/float64(length) <= room {
			return 0
		}
		e := float64(length) * (1 - room/float64(c.prev))
		return ceilDur(e - float64(elapsed))
	}
	// Otherwise it fits in the next window, once cur's weight has shrunk.
	wait := float64(length - elapsed)
	if float64(c.cur) > free {
		wait += float64(length) * (1 - free/float64(c.cur))
	}
	return ceilDur(wait)
}

func ceilDur(ns float64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(ns))
}

// Seconds rounds d up to whole seconds, the unit of X-RateLimit-Reset and
// Retry-After: a client that waits that long finds room.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
