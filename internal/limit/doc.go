// Package limit owns gatehouse's edge limiters (DESIGN §2 step 6, §6):
//
//   - [Window]: a sliding-window request budget per key, where a key is
//     (scope, client address) and the address is an IPv4 address or an IPv6
//     /48 prefix ([KeyFor]). The gateway keys it by (app, client) and, for
//     unknown hosts, by client alone.
//   - [Subjects]: the limits a verified token carries as claims (rps,
//     connections, read_Bps, write_Bps), per token subject: a [Subject] is
//     the (issuer, sub) pair, since a sub is unique only within its issuer.
//     rps is a bucket of n requests refilled at n a second (GCRA), not a
//     window: see pace.
//   - [Reader] and [Writer]: byte-rate limiting that slows a stream to its
//     rate (backpressure) and never cuts it; [Hijacker] and [Conn] do the
//     same for a connection hijacked for a protocol switch (WebSocket).
//
// # Algorithm
//
// Window uses the weighted two-window counter (the "sliding window counter"
// of Cloudflare and nginx-style limiters), not a sliding log. Each key keeps
// two counters: the requests of the current fixed window and of the one
// before it. The estimate at time t, e seconds into the current window of
// length w, is
//
//	prev × (w − e)/w + cur
//
// and a charge of n units is admitted when estimate + n ≤ limit. A sliding
// log is exact but stores one timestamp per admitted request: 600 requests
// a minute is 4.8 KB per client, and a flood of distinct clients multiplies
// that. The counter is O(1) per key (a few words; see BenchmarkMemory) and
// is exact whenever requests are evenly spread over the previous window; its
// error is bounded by the previous window's count, and it never admits more
// than the limit within one fixed window. A span of one window length that
// straddles two fixed windows may admit up to about twice the limit (the
// whole budget spent at the end of one window, then the estimate's share
// of the next as the old count's weight fades); docs/config.md says so. That trade is the right one at the
// edge, where memory per client address is what an attacker controls.
//
// # Bounded population
//
// Every limiter holds at most MaxKeys keys, in shards with an LRU list each;
// a new key evicts the least recently used one of its shard. An evicted key
// starts again with a full budget the next time it is seen, so under a flood
// of more than MaxKeys distinct addresses a client may get a fresh budget
// early: memory stays bounded and the flood itself is what is limited.
//
// # Per-process counting
//
// Each gateway process counts on its own; there is no shared quota store on
// the hot path. With N gateways behind a load balancer that spreads one
// client's requests over all of them, the effective cluster-wide limit is
// limit × N. Size the per-app limit with that in mind.
//
// # Concurrency
//
// A charge is atomic: it reads and updates one key under that key's shard
// lock, so a concurrent burst of 1,000 requests against a budget of 600
// admits exactly 600. Every type here is safe for concurrent use.
//
// Time comes from an injected Now func (nil means time.Now), so tests move
// the clock by hand. The byte-rate limiters wait in real time
// (golang.org/x/time/rate).
package limit
