package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// ForwarderOptions configure a [Forwarder].
type ForwarderOptions struct {
	// Upstreams are the resolvers to forward to, as host:port, tried in
	// order. Required: a nil *Forwarder is how recursion is off.
	Upstreams []string
	// Timeout bounds one exchange with one upstream (the TCP retry of a
	// truncated answer is another). Zero: 2 s.
	Timeout time.Duration
	// Deadline bounds one query across every upstream. Zero: 5 s, under
	// the usual stub resolver's own timeout.
	Deadline time.Duration
}

// Forwarder relays queries for names outside every zone to upstream
// resolvers: DESIGN §8's recursion, which the caller offers only to the
// platform. It holds no connections and starts no goroutines; each query
// dials its own, bounded by its context and the timeouts. Safe for
// concurrent use.
type Forwarder struct {
	upstreams []string
	timeout   time.Duration
	deadline  time.Duration
}

// ednsSize is the UDP payload size asked of upstreams and stated in the
// server's own OPT records: the DNS flag day 2020 value that avoids IP
// fragmentation.
const ednsSize = 1232

// forwardedOption is the EDNS option (local/experimental range, RFC 6891
// §6.1.2) that marks a query a gatehouse forwarded. A marked query is
// never forwarded again: an upstream list that leads back to a gatehouse
// (itself, or a peer that forwards to it) would otherwise turn one query
// into a chain of forwards that feeds itself for as long as it runs.
const forwardedOption uint16 = 0xFE47

// forwarded reports whether req carries [forwardedOption].
func forwarded(req *mdns.Msg) bool {
	if o := req.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if e.Option() == forwardedOption {
				return true
			}
		}
	}
	return false
}

// NewForwarder validates o. It dials nothing.
func NewForwarder(o ForwarderOptions) (*Forwarder, error) {
	if len(o.Upstreams) == 0 {
		return nil, errors.New("dns: forwarder: at least one upstream is required")
	}
	for _, u := range o.Upstreams {
		if _, port, err := net.SplitHostPort(u); err != nil || port == "" {
			return nil, fmt.Errorf("dns: forwarder: upstream %q is not host:port", u)
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Deadline <= 0 {
		o.Deadline = 5 * time.Second
	}
	return &Forwarder{upstreams: append([]string(nil), o.Upstreams...), timeout: o.Timeout, deadline: o.Deadline}, nil
}

// recursable reports whether req is a query the forwarder may relay: a
// standard query with RD set for one IN name outside every zone, that no
// gatehouse has forwarded already. A question for a [metaType] (a zone
// transfer, OPT, TSIG…) is never relayed: [Answer] refuses it for every
// name, and an upstream must not be asked what this server would refuse.
// Names in a zone are answered by [Answer], never forwarded.
func recursable(req *mdns.Msg, zones []Zone) bool {
	if req.Opcode != mdns.OpcodeQuery || req.Response || !req.RecursionDesired || len(req.Question) != 1 || forwarded(req) {
		return false
	}
	q := req.Question[0]
	if q.Qclass != mdns.ClassINET || metaType(q.Qtype) {
		return false
	}
	return findZone(strings.ToLower(strings.TrimSuffix(q.Name, ".")), zones) == nil
}

// Forward answers req, a [recursable] query, from the upstreams: the
// first upstream's answer, relayed with req's id and RA set, or SERVFAIL
// when none answers in time. network is the transport req came over,
// "udp" or "tcp"; the upstreams are asked over the same one, and a
// truncated UDP answer is asked again over TCP.
func (f *Forwarder) Forward(ctx context.Context, req *mdns.Msg, network string) *mdns.Msg {
	ctx, cancel := context.WithTimeout(ctx, f.deadline)
	defer cancel()
	q := req.Question[0]
	out := new(mdns.Msg)
	out.SetQuestion(q.Name, q.Qtype)
	out.Question[0].Qclass = q.Qclass
	out.RecursionDesired = true
	out.CheckingDisabled = req.CheckingDisabled
	// RFC 6840 §5.7: AD in a query asks for AD in the answer, without the
	// DNSSEC records DO asks for, and §5.8 has a validating upstream set
	// it only then: dropped here, the client would never get it.
	out.AuthenticatedData = req.AuthenticatedData
	do := false
	if o := req.IsEdns0(); o != nil {
		do = o.Do()
	}
	out.SetEdns0(ednsSize, do)
	opt := out.IsEdns0()
	opt.Option = append(opt.Option, &mdns.EDNS0_LOCAL{Code: forwardedOption})

	resp, err := f.exchange(ctx, out, network)
	if err != nil {
		fail := new(mdns.Msg)
		fail.SetRcode(req, mdns.RcodeServerFailure)
		fail.RecursionAvailable = true
		return fail
	}
	return relay(req, resp)
}

// exchange asks each upstream in turn until one gives a usable answer.
func (f *Forwarder) exchange(ctx context.Context, m *mdns.Msg, network string) (*mdns.Msg, error) {
	var errs []error
	for _, u := range f.upstreams {
		if ctx.Err() != nil {
			break
		}
		r, err := f.ask(ctx, m, network, u)
		if err == nil && r.Truncated && network == "udp" {
			r, err = f.ask(ctx, m, "tcp", u)
		}
		if err == nil {
			err = usable(m, r)
		}
		if err == nil {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("%s %s: %w", network, u, err))
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return nil, fmt.Errorf("dns: forward %s: %w", m.Question[0].Name, errors.Join(errs...))
}

// ask is one exchange with one upstream. The connection is closed when
// ctx ends, so a cancelled query does not wait out its read deadline.
func (f *Forwarder) ask(ctx context.Context, m *mdns.Msg, network, upstream string) (*mdns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c := &mdns.Client{Net: network, Timeout: f.timeout}
	co, err := c.DialContext(ctx, upstream)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	stop := context.AfterFunc(ctx, func() { co.Close() })
	defer stop()
	m = m.Copy()
	m.Id = mdns.Id() // a fresh id per exchange: a late answer to another is ignored
	r, _, err := c.ExchangeWithConnContext(ctx, m, co)
	return r, err
}

// usable checks that r answers m, and that its rcode is an answer a
// resolver keeps rather than a reason to ask the next upstream.
func usable(m, r *mdns.Msg) error {
	if !r.Response || r.Opcode != mdns.OpcodeQuery || len(r.Question) != 1 {
		return errors.New("not a response to the query")
	}
	q, rq := m.Question[0], r.Question[0]
	if !strings.EqualFold(q.Name, rq.Name) || q.Qtype != rq.Qtype || q.Qclass != rq.Qclass {
		return fmt.Errorf("answers another question (%s)", rq.String())
	}
	switch r.Rcode {
	case mdns.RcodeSuccess, mdns.RcodeNameError:
		return nil
	}
	return fmt.Errorf("rcode %s", mdns.RcodeToString[r.Rcode])
}

// relay turns an upstream's answer into the reply to req: req's id and
// question, RA set, never authoritative, AD as the upstream says when req
// asked for it, and an OPT record only if req had one.
func relay(req, r *mdns.Msg) *mdns.Msg {
	resp := new(mdns.Msg)
	resp.SetReply(req)
	resp.Rcode = r.Rcode
	resp.RecursionAvailable = true
	// RFC 6840 §5.8: AD only to a query with AD or DO set, which says the
	// client understands it, "to protect legacy stub resolvers and
	// middleboxes"; an upstream from before RFC 6840 sets it for all.
	do := false
	if o := req.IsEdns0(); o != nil {
		do = o.Do()
	}
	resp.AuthenticatedData = r.AuthenticatedData && (req.AuthenticatedData || do)
	resp.Answer = r.Answer
	resp.Ns = r.Ns
	for _, rr := range r.Extra {
		if rr.Header().Rrtype != mdns.TypeOPT {
			resp.Extra = append(resp.Extra, rr)
		}
	}
	if o := req.IsEdns0(); o != nil {
		resp.SetEdns0(ednsSize, o.Do())
	}
	return resp
}
