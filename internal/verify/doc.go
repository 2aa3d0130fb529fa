// Package verify proves claims before anything becomes routable (DESIGN
// §4): [Host] checks that a host holds its enrolled Ed25519 key at the
// address it announced, by a fresh-nonce challenge to that address.
//
// It owns no state; callers (internal/discovery) decide what a failure
// means. Each failure wraps one of the sentinel errors, and [Reason] turns
// it into a short metrics label.
package verify
