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
