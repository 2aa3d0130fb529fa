package route

import (
	"context"
	"net/netip"
	"time"
)

// Request is what the L7 layers learn about one request, carried in its
// context from observe down to dispatch. Each layer fills its own fields;
// a layer below reads what the layers above wrote. Not safe for concurrent
// writes: one request is handled by one goroutine at a time.
type Request struct {
	ID    string    // X-Request-Id, kept from the client or generated (observe)
	Start time.Time // when observe saw the request

	Table *Table // the one table snapshot this request uses (route)
	Match Match  // what the Host reached (route)

	// ClientIP is the address limits are charged to and X-Gatehouse-Client-Ip
	// carries: the peer, or a trusted proxy's X-Forwarded-For, or a verified
	// peer gateway's signed mark (hygiene).
	ClientIP netip.Addr
	// ForwardedBy is the cluster id of the peer gateway that forwarded this
	// request, once its signature verified; empty otherwise (hygiene).
	ForwardedBy string
	// ForwardMark is that peer's X-Gatehouse-Client value, once it
	// verified: an answer saying no host here is signed over it.
	ForwardMark string
	// ForwardMarked: the request arrived with X-Gatehouse-Forwarded,
	// verified or not, whoever it names (hygiene, through the cluster
	// layer's check). Such a request is never forwarded again, so that
	// gateways that disagree on the cluster set, or a clusters: entry
	// that reaches this gateway, cannot loop a request; the marks
	// themselves are stripped and, unless verified, believe nothing
	// (ClientIP stays the connecting address).
	ForwardMarked bool

	Subject string   // token subject, after verification (auth)
	Issuer  string   // the issuer of that subject: a sub is unique only within it (auth)
	Scopes  []string // token scopes, after verification (auth)

	// Status is the status code written to the client (observe's writer).
	Status int
	// FailoverCluster is set by dispatch when a peer cluster served the
	// response.
	FailoverCluster string
	// UpgradedTo is the id of the host that answered 101 to the request,
	// once it did, which the upgraded connection is then open to (proxy);
	// empty for one a peer cluster answered.
	UpgradedTo string
	// Contained is set by the proxy when it answered on the serving
	// goroutine alone (every attempt on its fast path): nothing it
	// started for the request runs on after it returns, so the memory the
	// request was served from may be reused (gateway.Gateway.RequestDone).
	Contained bool
}

type requestKey struct{}

// WithRequest returns ctx carrying r.
func WithRequest(ctx context.Context, r *Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// RequestFrom returns the request info in ctx, or nil outside the L7 path.
func RequestFrom(ctx context.Context) *Request {
	r, _ := ctx.Value(requestKey{}).(*Request)
	return r
}

// RequestContext is a context carrying a Request in the same allocation,
// for the one layer that creates each request's Request: where
// WithRequest allocates a context value beside the Request, a
// RequestContext is both. [RequestFrom] finds Req in it (or in any context
// derived from it) exactly as one stored with WithRequest. Set Context to
// the parent before use; the zero value is not a usable context.
type RequestContext struct {
	context.Context
	Req Request
}

// Value returns &c.Req for the key [RequestFrom] asks for, and otherwise
// what the parent holds.
func (c *RequestContext) Value(key any) any {
	if key == (requestKey{}) {
		return &c.Req
	}
	return c.Context.Value(key)
}
