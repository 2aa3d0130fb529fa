package httpwire

import "context"

// checkedKey marks a context under which every request's header fields
// were checked by the rules below when they were read.
type checkedKey struct{}

// MarkChecked returns ctx marked for the requests a server reads under
// it, when that server (the lane) takes a request only if its field
// names are tokens, its values pass ValidValue, it has no
// Transfer-Encoding and at most one Content-Length. The hygiene layer
// checks the same on every request another server feeds it (net/http,
// whose rules differ on framing); on a marked one it would find nothing.
//
// Mark a connection's base context, once: a request's context is looked
// up through every layer's on the way, and the mark is found near its end.
func MarkChecked(ctx context.Context) context.Context {
	return context.WithValue(ctx, checkedKey{}, true)
}

// Checked reports whether ctx, a request's context, carries MarkChecked's
// mark.
func Checked(ctx context.Context) bool {
	v, _ := ctx.Value(checkedKey{}).(bool)
	return v
}

// lineLimitKey carries the request-line limit of the listener a
// connection came to.
type lineLimitKey struct{}

// WithLineLimit returns ctx carrying n, the longest request line (method,
// target and version, without the CRLF) the listener serving under ctx
// takes: it answers a longer one 414 (DESIGN §3). A server whose own head
// limit is looser than n cannot tell a line too long to read from a head
// too big to read; the mark tells a reader in front of it (gateway's
// framing guard) where to cut such a line off and answer 414 itself.
func WithLineLimit(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, lineLimitKey{}, n)
}

// LineLimit returns the limit WithLineLimit put on ctx, or 0 for none.
func LineLimit(ctx context.Context) int {
	n, _ := ctx.Value(lineLimitKey{}).(int)
	return n
}
