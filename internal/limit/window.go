package limit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
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
	// MaxKeys bounds the keys held (LRU eviction per shard; the bound is
	// split evenly over 32 shards, so it is rounded up to a multiple of
	// 32). Zero means 100,000; negative is an error.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Window is a sliding-window limiter over a bounded population of keys
// (weighted two-window counter; see the package doc). Safe for concurrent
// use.
type Window struct {
	now func() time.Time
	t   *table[Key, counter]
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
	return &Window{now: o.Now, t: newTable[Key, counter](o.MaxKeys)}, nil
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

// charge is the whole algorithm; c is locked. It works in exact integer
// arithmetic (128-bit products) so that the time it says a request fits is
// the time it does fit: the estimate prev×(length−e)/length + cur is
// compared as prev×(length−e) + cur×length against limit×length.
func (c *counter) charge(now int64, n int, q Quota) Result {
	length := uint64(q.Window)
	now = c.advance(now, int64(length))
	if n < 0 {
		n = 0
	}
	carried := mul(uint64(c.prev), length-uint64(now-c.start)) // prev×(length−e)
	capacity := mul(uint64(q.Limit), length)
	r := Result{Limit: q.Limit}
	if uint64(c.cur)+uint64(n) <= math.MaxUint32 && !capacity.less(carried.add(mul(uint64(c.cur)+uint64(n), length))) {
		c.cur += uint32(n)
		r.Allowed = true
	} else {
		r.RetryAfter = c.until(now, n, q)
	}
	if used := carried.add(mul(uint64(c.cur), length)); used.less(capacity) {
		r.Remaining = int(capacity.sub(used).div(length))
	}
	if r.Remaining == 0 {
		r.Reset = c.until(now, 1, q)
	}
	return r
}

// advance moves c's fixed windows forward to the one holding now, and
// returns the time to count at: now, or the start of c's window when the
// wall clock went back before it (an NTP step, a restored VM). Counting at
// the real now would make the time into the window negative, and weigh the
// last window's count more than whole: a client well inside its budget
// would be refused, and told it fits again at once, until the clock caught
// up. Time that stands still for a counter costs nothing of the sort.
func (c *counter) advance(now, length int64) int64 {
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
	return max(now, c.start)
}

// until returns how long from now until n more units fit, given that no
// other charge happens meanwhile.
func (c *counter) until(now int64, n int, q Quota) time.Duration {
	if n > q.Limit {
		return q.Window // never fits; say "a window" rather than forever
	}
	length := uint64(q.Window)
	elapsed := uint64(now - c.start)
	free := uint64(q.Limit - n) // units that may be in the window beside the n
	cur := uint64(c.cur)
	// Inside the current window the carried weight prev×(length−e)/length
	// shrinks; n fits at the first e with prev×(length−e) ≤ room×length,
	// that is e ≥ length×(prev−room)/prev.
	if cur <= free {
		room := free - cur
		prev := uint64(c.prev)
		if prev <= room {
			return 0
		}
		e := ceilMulDiv(length, prev-room, prev)
		if e <= elapsed {
			return 0
		}
		return time.Duration(e - elapsed)
	}
	// Otherwise in the next window, where cur is carried: once
	// cur×(length−e) ≤ free×length.
	return time.Duration(length - elapsed + ceilMulDiv(length, cur-free, cur))
}

// u128 is an unsigned 128-bit integer, enough for units × nanoseconds.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	return u128{x.hi + y.hi + carry, lo}
}

func (x u128) sub(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	return u128{x.hi - y.hi - borrow, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo) }

// div returns x/d; the quotient must fit 64 bits (x.hi < d).
func (x u128) div(d uint64) uint64 {
	q, _ := bits.Div64(x.hi, x.lo, d)
	return q
}

// ceilMulDiv returns ⌈a×b/c⌉ for b ≤ c.
func ceilMulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, r := bits.Div64(hi, lo, c)
	if r != 0 {
		q++
	}
	return q
}

// Seconds rounds d up to whole seconds, the unit of X-RateLimit-Reset and
// Retry-After: a client that waits that long finds room.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
