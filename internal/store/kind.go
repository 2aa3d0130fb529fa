package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/edkey"
	"github.com/gatehouse-dev/gatehouse/internal/jsontext"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kind is one typed bucket: how a value's identity becomes its key, and
// what a value must satisfy to be written or read back.
type kind[T any] struct {
	what string // "app", for errors
	kv   jetstream.KeyValue
	// key encodes v's identity as a KV key, or says why it cannot.
	key func(v *T) (string, error)
	// valid checks v before a write and after a read.
	valid func(v *T) error
	// conn is the bus connection under kv.
	conn *nats.Conn
	// leader reads kv's keys where every acknowledged write is seen.
	leader *leaderGets
}

// latest is key's latest entry, as kv.Get returns it, read from the
// stream's leader (leaderGets): a write acknowledged before is in it.
func (k kind[T]) latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return k.leader.get(ctx, k.kv.Bucket(), key)
}

// reachable fails a call at once while the bus connection is down: the
// call would otherwise sit in nats.go's reconnect buffer for the whole
// JetStream API timeout (5 s) before the control API could answer 503.
func (k kind[T]) reachable(op, key string) error {
	if k.conn != nil && !k.conn.IsConnected() {
		return fmt.Errorf("store: %s %s %s: %w", op, k.what, key, nats.ErrDisconnected)
	}
	return nil
}

// decode turns a stored entry into a value, refusing an oversized value,
// bad JSON, JSON encoding/json would read as other than it says
// (jsontext.Check), an invalid value, and a value whose identity does not
// match its key, with an error wrapping ErrBadValue.
func (k kind[T]) decode(key string, val []byte) (*T, error) {
	if err := checkSize(val); err != nil {
		return nil, fmt.Errorf("store: %s %s: %w: %v", k.what, key, ErrBadValue, err)
	}
	v := new(T)
	if err := json.Unmarshal(val, v); err != nil {
		return nil, fmt.Errorf("store: %s %s: %w: bad json: %v", k.what, key, ErrBadValue, err)
	}
	if err := jsontext.Check(val); err != nil {
		return nil, fmt.Errorf("store: %s %s: %w: ambiguous json: %v", k.what, key, ErrBadValue, err)
	}
	if err := k.valid(v); err != nil {
		return nil, fmt.Errorf("store: %s %s: %w: %v", k.what, key, ErrBadValue, err)
	}
	if want, err := k.key(v); err != nil || want != key {
		return nil, fmt.Errorf("store: %s %s: %w: it is stored under the wrong key", k.what, key, ErrBadValue)
	}
	return v, nil
}

func (k kind[T]) get(ctx context.Context, key string) (*T, error) {
	if err := k.reachable("get", key); err != nil {
		return nil, err
	}
	e, err := k.latest(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("%w: %s %s", ErrNotFound, k.what, key)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get %s %s: %w", k.what, key, err)
	}
	return k.decode(key, e.Value())
}

func (k kind[T]) put(ctx context.Context, v *T) error {
	if v == nil {
		return fmt.Errorf("store: put %s: nil", k.what)
	}
	if err := k.valid(v); err != nil {
		return fmt.Errorf("store: put %s: %v", k.what, err)
	}
	key, err := k.key(v)
	if err != nil {
		return fmt.Errorf("store: put %s: %v", k.what, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: put %s %s: %v", k.what, key, err)
	}
	if err := checkSize(b); err != nil {
		return fmt.Errorf("store: put %s %s: %w", k.what, key, err)
	}
	if err := k.reachable("put", key); err != nil {
		return err
	}
	if _, err := k.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("store: put %s %s: %w", k.what, key, err)
	}
	return nil
}

// del purges key (one delete marker stays, so watchers see the delete),
// or returns ErrNotFound when there is nothing to delete.
func (k kind[T]) del(ctx context.Context, key string) error {
	if err := k.reachable("delete", key); err != nil {
		return err
	}
	_, err := k.latest(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return fmt.Errorf("%w: %s %s", ErrNotFound, k.what, key)
	}
	if err != nil {
		return fmt.Errorf("store: delete %s %s: %w", k.what, key, err)
	}
	if err := k.kv.Purge(ctx, key); err != nil {
		return fmt.Errorf("store: delete %s %s: %w", k.what, key, err)
	}
	return nil
}

// list returns every valid value under filter (jetstream.AllKeys for the
// whole bucket), sorted by key. Bad values are logged by bad and skipped.
func (k kind[T]) list(ctx context.Context, filter string, bad func(error)) ([]*T, error) {
	if err := k.reachable("list", filter); err != nil {
		return nil, err
	}
	entries, err := loadAll(ctx, k.leader, k.kv, false, filter)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", k.what, err)
	}
	keys := make([]string, 0, len(entries))
	for key := range entries {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := make([]*T, 0, len(keys))
	for _, key := range keys {
		v, err := k.decode(key, entries[key].Value())
		if err != nil {
			bad(err)
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// loadAll reads the latest entry of every live key matching any of
// filters (metaOnly: without its value), with every write acknowledged
// before it began.
//
// A watch is an ordered consumer, which the server places on any replica
// of the bucket's stream, one that may not have applied the writes
// acknowledged just before: a list right after a put missed it now and
// then on a 3-node cluster (the control API's neighbour check passed a
// record set it should have refused, an app delete's reference check
// missed a domain just made for it). So the stream's leader, which
// applies a write before acknowledging it, says first which entry under
// filters is the latest, and the load reads the watch past its initial
// values until it has delivered that entry or a later one, deletes
// counted: a replica behind delivers the writes it lacked as updates
// then. A key deleted meanwhile is dropped as its marker comes.
//
// The entry can vanish before the replica delivers it (the sweep purging
// a marker that was the latest), and nothing later may come: from its
// initial values on, the load asks the leader again, recheckFirst after
// them and then twice as long each time, and is done once the leader's
// latest is one the watch has delivered (none newer remains). The wait
// is bounded by ctx or, without a deadline, by the JetStream API
// timeout.
//
// A replica can also stay behind for seconds (one restarted behind
// 100,000 writes took 10 to 20 s to catch up), and a list it served
// waited out the bound and failed as the store not answering (503),
// though the leader held every write. So with those asks the load also
// reads from the leader what the watch has not delivered (readBehind),
// and is done once it has: a replica a few entries behind costs a few
// requests, and one further behind than behindMax is waited for as
// before. Serving the replica's copy instead would miss writes
// acknowledged before the list, which the control API's reference and
// neighbour checks rely on.
func loadAll(ctx context.Context, leader *leaderGets, kv jetstream.KeyValue, metaOnly bool, filters ...string) (map[string]jetstream.KeyValueEntry, error) {
	want, err := leader.lastSeq(ctx, kv.Bucket(), filters...)
	if err != nil {
		return nil, err
	}
	var opts []jetstream.WatchOpt
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	// WatchFiltered rewrites the slice it is given.
	w, err := kv.WatchFiltered(ctx, append([]string(nil), filters...), opts...)
	if err != nil {
		return nil, err
	}
	defer stopWatch(leader.nc, w)
	out := make(map[string]jetstream.KeyValueEntry)
	var seen uint64
	initial := true
	var late <-chan time.Time
	recheck := time.NewTimer(recheckFirst)
	recheck.Stop()
	defer recheck.Stop()
	wait := recheckFirst
	tooFar := false
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watcher closed during load")
			}
			if e == nil {
				initial = false
				if _, ok := ctx.Deadline(); !ok && leader.timeout > 0 {
					t := time.NewTimer(leader.timeout)
					defer t.Stop()
					late = t.C
				}
				recheck.Reset(wait)
			} else {
				seen = max(seen, e.Revision())
				if isDelete(e) {
					delete(out, e.Key())
				} else {
					out[e.Key()] = e
				}
			}
			if !initial && seen >= want {
				return out, nil
			}
		case <-recheck.C:
			// A write since the load began is as good as the entry it
			// waits for, once delivered; none newer than seen means
			// the rest are gone. A failed ask (an election) leaves the
			// watch to deliver, as before it.
			if now, err := leader.lastSeq(ctx, kv.Bucket(), filters...); err == nil {
				want = min(want, now)
				if seen >= want {
					return out, nil
				}
			}
			if !tooFar {
				switch err := readBehind(ctx, leader, kv.Bucket(), filters, seen, out); {
				case err == nil:
					return out, nil
				case errors.Is(err, errTooFarBehind):
					tooFar = true
				}
			}
			wait = min(2*wait, recheckMax)
			recheck.Reset(wait)
		case <-late:
			return nil, fmt.Errorf("the watch's replica delivered up to sequence %d, the leader has %d: %w", seen, want, context.DeadlineExceeded)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readBehind reads from bucket's stream leader every entry under filters
// after sequence seen, the latest the watch has delivered, and applies
// them to out, in stream order, as the watch would have: out is then
// every live key as the leader has it, with every write acknowledged
// before the load began. It reads to the stream's end, not to the entry
// the load waits for: with one entry per key kept, a key written again
// since has only its newer entry, and out would keep the replica's older
// one. It reads at most behindMax entries (errTooFarBehind past them: a
// replica that far behind, a new one, is waited for as before), and
// leaves out as it was when it fails.
//
// Not caught: a key the leader lost with no later entry to read. A delete
// whose marker the sweep has removed since (the replica is MarkerAge or
// more behind) or a subject an operator purged leaves the replica's last
// value in out. Waiting need not drop it either: a replica catching up from
// the leader's snapshot removes the key without delivering a delete.
// Checking every key of out with the leader would cost a list a request
// per key.
func readBehind(ctx context.Context, leader *leaderGets, bucket string, filters []string, seen uint64, out map[string]jetstream.KeyValueEntry) error {
	var msgs []*storedMsg
	for _, f := range filters {
		subject := "$KV." + bucket + "." + f
		for from := seen + 1; ; {
			m, err := leader.next(ctx, bucket, subject, from)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			}
			if err != nil {
				return err
			}
			if len(msgs) == behindMax {
				return errTooFarBehind
			}
			msgs = append(msgs, m)
			from = m.Seq + 1
		}
	}
	// Filters may overlap: the later entry of a key wins, whichever
	// filter found it.
	sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].Seq < msgs[j].Seq })
	type change struct {
		key string
		e   jetstream.KeyValueEntry // nil: a delete
	}
	changes := make([]change, 0, len(msgs))
	prefix := "$KV." + bucket + "."
	for _, m := range msgs {
		key, ok := strings.CutPrefix(m.Subject, prefix)
		if !ok {
			return jetstream.ErrInvalidJetStreamResponse
		}
		if len(m.Hdrs) > 0 {
			h, err := nats.DecodeHeadersMsg(m.Hdrs)
			if err != nil {
				return fmt.Errorf("bad message get answer: %v", err)
			}
			if deleteHeader(h) {
				changes = append(changes, change{key: key})
				continue
			}
		}
		changes = append(changes, change{key, &leaderEntry{bucket: bucket, key: key, value: m.Data, rev: m.Seq, created: m.Time}})
	}
	for _, c := range changes {
		if c.e == nil {
			delete(out, c.key)
		} else {
			out[c.key] = c.e
		}
	}
	return nil
}

// behindMax bounds the entries readBehind reads from the leader, one
// request each: a thousand take a fraction of a second.
const behindMax = 1000

var errTooFarBehind = errors.New("the watch's replica is too far behind to read the rest from the leader")

// recheckFirst and recheckMax bound how long loadAll waits on a watch
// that delivers nothing before it asks the leader again whether the
// entry it waits for is still there: a replica behind catches up within
// milliseconds, and a list whose entry was swept is held no longer.
const (
	recheckFirst = 50 * time.Millisecond
	recheckMax   = time.Second
)

// stopWatch unsubscribes w and drains its channel until the library
// closes it: its delivery goroutine blocks on a full channel and would
// otherwise never exit. Bounded, in case the close never comes.
//
// Stop also deletes w's consumer, a JetStream API call that waits out
// the API timeout (5 s) when the bus is down, before it or meanwhile:
// that held up every stop of a gateway whose bus was down, per watcher.
// The wait ends once nc, the connection under w, is not connected (nil:
// never). w is unsubscribed at once either way; the call goes on alone
// and ends with the reconnect (deleting the consumer) or with the
// connection's close, and a server drops an idle ordered consumer
// itself.
func stopWatch(nc *nats.Conn, w jetstream.KeyWatcher) {
	ctx, cancel := whileConnected(context.Background(), nc)
	defer cancel()
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Stop() }()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}

// whileConnected returns a copy of ctx that also ends as soon as nc is
// not connected, at once if it is not now (nil nc: never): a call that
// cannot reach a server then ends instead of waiting out its timeout.
func whileConnected(ctx context.Context, nc *nats.Conn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if nc == nil {
		return ctx, cancel
	}
	down := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	if !nc.IsConnected() { // after StatusChanged: a change in between is seen
		nc.RemoveStatusListener(down)
		cancel()
		return ctx, cancel
	}
	go func() {
		defer nc.RemoveStatusListener(down)
		select {
		case <-down:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// ErrTooLarge is returned, wrapped, for a value past the store's bound of
// 1 MiB as stored (JSON for the typed methods): by a write of one, and by
// CertKV.Load. A typed read of one returns an ErrBadValue.
var ErrTooLarge = errors.New("value too large")

// checkSize refuses a value past maxValueSize. Buckets this package
// creates refuse such writes themselves; one made by another tool, or by
// hand, may not, and every gateway would hold the value in memory.
func checkSize(val []byte) error {
	if len(val) > maxValueSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(val), maxValueSize)
	}
	return nil
}

func isDelete(e jetstream.KeyValueEntry) bool {
	return e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge
}

// The five routing kinds.

func appKind(kv jetstream.KeyValue) kind[route.App] {
	return kind[route.App]{what: "app", kv: kv,
		key: func(a *route.App) (string, error) { return nameKey(a.ID) },
		valid: func(a *route.App) error {
			if !route.ValidLabel(a.ID) {
				return fmt.Errorf("app id %q is not a DNS label", a.ID)
			}
			return checkAppEnforceable(a)
		}}
}

// checkAppEnforceable refuses an app whose settings the gateway would
// apply open: it serves every status but suspended and retired, allows on
// every policy action but "deny", never matches a rule whose method is no
// token or whose path is not clean (it matches cleaned request paths),
// and checks neither tokens nor paths of a passthrough app. The API
// refuses all of these (internal/api's checkApp; the rule check is
// route.PolicyRule.Check there, and CheckStored, which takes a rule path
// stored before Check refused more, here); a value written around it by
// another tool or a buggy peer must not open what it meant to close. The
// zero mode and status are http and active, as the gateway has always
// read them.
func checkAppEnforceable(a *route.App) error {
	switch a.Mode {
	case "", route.ModeHTTP, route.ModePassthrough:
	default:
		return fmt.Errorf("app %s: mode must be http or passthrough, got %q", a.ID, a.Mode)
	}
	switch a.Status {
	case "", route.StatusActive, route.StatusSuspended, route.StatusRetired:
	default:
		return fmt.Errorf("app %s: status must be active, suspended or retired, got %q", a.ID, a.Status)
	}
	if a.Mode == route.ModePassthrough && (a.Auth.Required || len(a.Policy) > 0) {
		return fmt.Errorf("app %s: a passthrough app can have no auth.required and no policy: the gateway cannot enforce them", a.ID)
	}
	for i, r := range a.Policy {
		if err := r.CheckStored(); err != nil {
			return fmt.Errorf("app %s: policy[%d]: %v", a.ID, i, err)
		}
	}
	return nil
}

func domainKind(kv jetstream.KeyValue) kind[route.Domain] {
	return kind[route.Domain]{what: "domain", kv: kv,
		key: func(d *route.Domain) (string, error) { return nameKey(d.Domain) },
		valid: func(d *route.Domain) error {
			if n, ok := route.NormalizeHost(d.Domain); !ok || n != d.Domain {
				return fmt.Errorf("domain %q is not a normalized host name", d.Domain)
			}
			if !route.ValidLabel(d.App) {
				return fmt.Errorf("domain %s: app id %q is not a DNS label", d.Domain, d.App)
			}
			return nil
		}}
}

func zoneKind(kv jetstream.KeyValue) kind[route.Zone] {
	return kind[route.Zone]{what: "zone", kv: kv,
		key: func(z *route.Zone) (string, error) { return nameKey(z.Name) },
		valid: func(z *route.Zone) error {
			if n, ok := route.NormalizeHost(z.Name); !ok || n != z.Name {
				return fmt.Errorf("zone %q is not a normalized host name", z.Name)
			}
			return nil
		}}
}

func recordKind(kv jetstream.KeyValue) kind[route.Record] {
	return kind[route.Record]{what: "record", kv: kv,
		key: func(r *route.Record) (string, error) { return recordKey(r.Zone, r.Name, r.Type) },
		valid: func(r *route.Record) error {
			if n, ok := route.NormalizeHost(r.Zone); !ok || n != r.Zone {
				return fmt.Errorf("record zone %q is not a normalized host name", r.Zone)
			}
			if r.Name == "" || r.Type == "" {
				return fmt.Errorf("record in %s: name and type are required", r.Zone)
			}
			return nil
		}}
}

func hostKeyKind(kv jetstream.KeyValue) kind[route.HostKey] {
	return kind[route.HostKey]{what: "host key", kv: kv,
		key:   func(h *route.HostKey) (string, error) { return nameKey(h.HostID) },
		valid: checkHostKey}
}

// checkHostKey refuses an enrolment discovery could not trust as written:
// a host id the host protocol does not allow, an app id that is none, or
// a public key that is not one. A point of small order (an all-zero
// buffer, say) verifies signatures that anyone can make without a
// private key, so whoever is on the bus could claim the host. The API
// refuses the same at enrolment; a value written around it must not be
// read as an enrolment either.
func checkHostKey(h *route.HostKey) error {
	if !host.ValidHostID(h.HostID) {
		return fmt.Errorf("host_id %q: must be 1 to 128 of [A-Za-z0-9._-], starting with a letter or digit", h.HostID)
	}
	pub, err := host.ParsePublicKey(h.PublicKey)
	if err != nil {
		return fmt.Errorf("host %s: %v", h.HostID, err)
	}
	if edkey.SmallOrder(pub) {
		return fmt.Errorf("host %s: public_key is a point of small order, not a key: anyone can sign for it", h.HostID)
	}
	for i, a := range h.Apps {
		if !route.ValidLabel(a) {
			return fmt.Errorf("host %s: apps[%d]: %q is not an app id", h.HostID, i, a)
		}
	}
	return nil
}
