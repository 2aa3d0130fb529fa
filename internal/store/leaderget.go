package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderGets reads a key's latest entry from its bucket's stream leader.
//
// nats.go's KeyValue.Get is a direct get when the bucket's stream allows
// them (every bucket nats.go makes does), and any replica answers one,
// one that has not applied the write acknowledged just before it too: on
// a 3-node cluster up to one Get in ten right after its Put found
// nothing, and the control API answered 404 for an app its PUT had just
// made, or refused a host enrolment naming it. Only the leader answers
// the JetStream API's message get, and it applies a write before
// acknowledging it. Turning the streams' direct gets off would route
// nats.go's Get there too, but a gateway of an older release, bound with
// them on, would find no responder for its reads until it restarted: a
// rolling upgrade would take certificates and the control API from the
// nodes not yet upgraded. So the streams keep them, and the store's own
// reads ask the leader. Watches and lists are consumers, which direct
// gets never served, but which a replica serves too: a list asks the
// leader how far it must read (lastSeq, loadAll), and what a replica
// that stays behind has not delivered (next, readBehind).
//
// Cost: one request to the leader per read, a hop more from a follower's
// node; while the stream has no leader (an election), a read fails
// (Unavailable): the replicas answer "temporarily unavailable" (503) at
// once, or none does until its deadline while a server is in its first
// seconds, where a replica would have answered from its copy.
//
// A page (MaxPage values) is as many reads, up to pageReaders at a time
// (readInOrder), a round trip each on a network. nats-server (2.15) has
// no batched read the leader alone answers: the message get refuses
// batch and max_bytes, and its multi_last is the direct get's, which
// every replica answers, up_to_seq included (a replica behind it answers
// with what it has, without the write).
type leaderGets struct {
	nc *nats.Conn
	// api is the JetStream API prefix the store's JetStream uses.
	api string
	// timeout bounds a read whose ctx has no deadline, as nats.go's
	// DefaultTimeout bounds its own calls.
	timeout time.Duration
}

func newLeaderGets(js jetstream.JetStream) *leaderGets {
	o := js.Options()
	api := jetstream.DefaultAPIPrefix
	switch {
	case o.Domain != "":
		api = "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		api = strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return &leaderGets{nc: js.Conn(), api: api, timeout: o.DefaultTimeout}
}

// msgGetResponse is the JetStream API's answer to STREAM.MSG.GET.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error"`
	Message *storedMsg          `json:"message"`
}

// get returns key's latest entry in bucket as nats.go's KeyValue.Get
// does: ErrInvalidKey for a key it refuses, ErrKeyNotFound for a key
// never written or whose latest entry is a delete, purge or expiry marker
// (deleteHeader).
func (l *leaderGets) get(ctx context.Context, bucket, key string) (jetstream.KeyValueEntry, error) {
	// A wildcard in the key would make last_by_subj another key's.
	if !validKey(key) {
		return nil, jetstream.ErrInvalidKey
	}
	subject := "$KV." + bucket + "." + key
	msg, err := l.last(ctx, bucket, subject)
	if err != nil {
		return nil, err
	}
	if msg.Subject != subject {
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	if len(msg.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(msg.Hdrs)
		if err != nil {
			return nil, fmt.Errorf("bad message get answer: %v", err)
		}
		if deleteHeader(h) {
			return nil, jetstream.ErrKeyNotFound
		}
	}
	return &leaderEntry{bucket: bucket, key: key, value: msg.Data, rev: msg.Seq, created: msg.Time}, nil
}

// lastSeq returns the stream sequence of the latest entry, put or marker,
// under any of filters (keys, wildcards allowed) in bucket: 0 when there
// is none. Every write under them acknowledged before the call is at
// that sequence or before it.
func (l *leaderGets) lastSeq(ctx context.Context, bucket string, filters ...string) (uint64, error) {
	var seq uint64
	for _, f := range filters {
		msg, err := l.last(ctx, bucket, "$KV."+bucket+"."+f)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		seq = max(seq, msg.Seq)
	}
	return seq, nil
}

// storedMsg is a message as the JetStream API's STREAM.MSG.GET answers it.
type storedMsg struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Hdrs    []byte    `json:"hdrs"`
	Data    []byte    `json:"data"`
	Time    time.Time `json:"time"`
}

// last asks bucket's stream leader for the latest message under subject,
// which may hold wildcards (the stores' LoadLastMsg take them):
// ErrKeyNotFound when there is none.
func (l *leaderGets) last(ctx context.Context, bucket, subject string) (*storedMsg, error) {
	return l.msgGet(ctx, bucket, struct {
		LastBySubj string `json:"last_by_subj"`
	}{subject})
}

// next asks bucket's stream leader for the first message at or after
// sequence seq under subject, which may hold wildcards: ErrKeyNotFound
// when there is none.
func (l *leaderGets) next(ctx context.Context, bucket, subject string, seq uint64) (*storedMsg, error) {
	return l.msgGet(ctx, bucket, struct {
		Seq        uint64 `json:"seq"`
		NextBySubj string `json:"next_by_subj"`
	}{seq, subject})
}

// msgGet sends bucket's stream leader the message get req.
func (l *leaderGets) msgGet(ctx context.Context, bucket string, r any) (*storedMsg, error) {
	req, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok && l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	m, err := l.nc.RequestWithContext(ctx, l.api+"STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("bad message get answer: %v", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrKeyNotFound
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		// A bucket deleted under a running gateway is the store not
		// answering, as a write to it says (no stream acknowledges
		// it) and the direct get this replaced said (no responders):
		// Unavailable, so the control API answers 503 and discovery
		// keeps its hosts, not a 500 or every host refused as not
		// enrolled. The next Open makes the bucket again.
		return nil, fmt.Errorf("%w: %w", jetstream.ErrNoStreamResponse, resp.Error)
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	return resp.Message, nil
}

// validKey is nats.go's check of a KV key: [-/_=.a-zA-Z0-9], no empty
// token.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for _, c := range []byte(key) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return false
		}
	}
	return true
}

// leaderEntry is a jetstream.KeyValueEntry read by leaderGets.
type leaderEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
}

func (e *leaderEntry) Bucket() string                  { return e.bucket }
func (e *leaderEntry) Key() string                     { return e.key }
func (e *leaderEntry) Value() []byte                   { return e.value }
func (e *leaderEntry) Revision() uint64                { return e.rev }
func (e *leaderEntry) Created() time.Time              { return e.created }
func (e *leaderEntry) Delta() uint64                   { return 0 }
func (e *leaderEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
