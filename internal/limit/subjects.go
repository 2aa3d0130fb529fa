package limit

import (
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Claims are the limits a token carries for its subject (DESIGN §6). Zero
// means "no limit" for each field.
type Claims struct {
	RPS         int   // requests per second
	Connections int   // requests in flight at once
	ReadBps     int64 // request body bytes per second the gateway reads from the client
	WriteBps    int64 // response bytes per second the gateway writes to the client
}

// SubjectsOptions configures [Subjects].
type SubjectsOptions struct {
	// MaxSubjects bounds the subjects (issuer, sub pairs) held
	// (auth.max_subjects). Zero means
	// 10,000; negative is an error.
	MaxSubjects int
	// Now is the clock of the rps window; nil means time.Now.
	Now func() time.Time
}

// Subject names a token subject: the issuer that signed the token (iss)
// and the sub it gave. A sub is unique only within its issuer (RFC 7519
// §4.1.2): two tenants' issuers may both mint "user1", and each must get
// its own budget, or one tenant could spend the other's. The key is the
// pair itself, never a string joined from it, so no choice of separator
// can make two pairs collide.
type Subject struct {
	Issuer string
	Sub    string
}

// hash picks k's shard; the shard's map compares the pair whole.
func (k Subject) hash() uint64 {
	h := maphash.String(seed, k.Issuer)
	h ^= maphash.String(seed, k.Sub) * 0x9e3779b97f4a7c15
	h ^= h >> 32
	return h
}

// Subjects enforces claim limits per [Subject] in a bounded population
// (LRU). Eviction passes over a subject with connections in flight while
// one of the eight least recently used subjects of its shard has none;
// past that it evicts the oldest anyway, so that memory stays bounded,
// and that subject starts again with fresh budgets. Safe for concurrent
// use.
type Subjects struct {
	now  func() time.Time
	t    *table[Subject, budget]
	gens atomic.Uint64 // the last budget generation given out
}

// budget is one subject's claim limits in use.
type budget struct {
	rps    pace
	active int32
	// gen tells this budget from a later one of the same subject, made
	// after eviction: a grant gives its slot back only to its own.
	gen   uint64
	read  *rate.Limiter // nil until a token with read_Bps is seen
	write *rate.Limiter
}

// DefaultMaxSubjects is the bound when SubjectsOptions.MaxSubjects is zero.
const DefaultMaxSubjects = 10_000

// NewSubjects returns an empty subject population.
func NewSubjects(o SubjectsOptions) (*Subjects, error) {
	if o.MaxSubjects < 0 {
		return nil, fmt.Errorf("limit: max subjects must not be negative, got %d", o.MaxSubjects)
	}
	if o.MaxSubjects == 0 {
		o.MaxSubjects = DefaultMaxSubjects
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Subjects{now: o.Now, t: newTable[Subject, budget](o.MaxSubjects)}, nil
}

// Grant is an admitted request's hold on its subject's limits. Release it
// exactly once when the request ends.
type Grant struct {
	s     *Subjects
	key   Subject
	gen   uint64 // the budget's generation the slot was taken from
	conn  bool
	Read  *rate.Limiter // nil: request body not limited
	Write *rate.Limiter // nil: response not limited
}

// Refusal says which claim limit refused a request.
type Refusal struct {
	Limit      string // "rps" or "connections"
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("limit: subject over its %s limit", r.Limit)
}

// Admit charges one request of k under c: one request of its rps budget
// (a bucket of RPS requests refilled at RPS a second, see pace) and one
// connection slot. It returns a Grant to release when the request ends,
// or a *Refusal. An rps unit charged to a request refused for connections
// is not given back: the attempt counted.
func (s *Subjects) Admit(k Subject, c Claims) (*Grant, error) {
	now := s.now().UnixNano()
	g := &Grant{s: s, key: k}
	var ref *Refusal
	with(s.t, k, pinned, func(v *budget, fresh bool) struct{} {
		if fresh {
			v.gen = s.gens.Add(1)
		}
		if c.RPS > 0 {
			if wait := v.rps.take(now, c.RPS); wait > 0 {
				ref = &Refusal{Limit: "rps", RetryAfter: wait}
				return struct{}{}
			}
		}
		if c.Connections > 0 {
			if int(v.active) >= c.Connections {
				ref = &Refusal{Limit: "connections", RetryAfter: time.Second}
				return struct{}{}
			}
		}
		v.active++
		g.conn, g.gen = true, v.gen
		g.Read = byteRate(&v.read, c.ReadBps)
		g.Write = byteRate(&v.write, c.WriteBps)
		return struct{}{}
	})
	if ref != nil {
		return nil, ref
	}
	return g, nil
}

func pinned(v *budget) bool { return v.active > 0 }

// pace is a subject's rps budget: a bucket of n requests that refills at
// n a second (GCRA, kept as the time the bucket is full again). A client
// that never sends more than n requests in any second, evenly or all at
// once, is never refused; one over its rate is refused as soon as the
// bucket is empty, and gets the time until one request fits. The
// weighted two-window counter of [Window] is not used here: it weighs the
// last second's requests as if spread evenly over it, so a client at 1.5
// requests a second under a claim of 2, or one sending its n at once each
// second, was refused. Its state is two numbers: 16 bytes a subject
// against the counter's 24.
type pace struct {
	full int64 // unix nanos at which the bucket is full again; 0: never used
	last int64 // the latest now seen: a wall clock that steps back stands still here
}

// take charges one request at now (unix nanos) under n a second. It
// returns zero when admitted, else how long until a request fits.
func (p *pace) take(now int64, n int) time.Duration {
	now = max(now, p.last) // time stands still until the clock catches up
	p.last = now
	step := max(int64(time.Second)/int64(n), 1) // rounded down: never slower than n a second
	debt := max(p.full, now) - now              // the bucket's spent part, in time to refill
	if room := int64(n-1) * step; debt > room {
		return time.Duration(debt - room)
	}
	p.full = now + debt + step
	return 0
}

// byteRate returns the subject's limiter for bps, creating it or following
// a changed claim; nil when bps is zero.
func byteRate(l **rate.Limiter, bps int64) *rate.Limiter {
	if bps <= 0 {
		return nil
	}
	if *l == nil {
		*l = NewRate(bps)
	} else if (*l).Limit() != rate.Limit(bps) {
		(*l).SetLimit(rate.Limit(bps))
		(*l).SetBurst(burstFor(bps))
	}
	return *l
}

// Release gives back g's connection slot. Calling it again does nothing.
// If the subject was evicted meanwhile, the slot went with its budget: a
// budget made for the subject since holds requests of its own.
func (g *Grant) Release() {
	if g == nil || !g.conn {
		return
	}
	g.conn = false
	peek(g.s.t, g.key, func(v *budget) {
		if v.gen == g.gen && v.active > 0 {
			v.active--
		}
	})
}

// Active returns k's requests in flight (for tests and metrics).
func (s *Subjects) Active(k Subject) int {
	n := 0
	peek(s.t, k, func(v *budget) { n = int(v.active) })
	return n
}

// Len returns the number of subjects (issuer, sub pairs) held.
func (s *Subjects) Len() int { return s.t.len() }
