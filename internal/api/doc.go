// Package api serves gatehouse's /api/v3 (DESIGN §7): JSON only, public
// read routes for anyone, control routes for the platform alone.
//
// Every control route checks the platform credential — the static control
// token or, through [Options.VerifyPlatform], a bearer JWT with scope
// platform — before it looks at the method or the body, and answers 401 to
// anyone else, whatever the route, method or body. Every body is decoded
// strictly (unknown fields refused, 1 MiB cap) and validated in full before
// anything is written to the store, so bad input changes nothing.
//
//	a, err := api.New(api.Options{Store: st, NotFound: store.ErrNotFound, ControlToken: tok})
//	mux.Handle("/api/v3/", a)
//
// The handler is mounted on the management listener and under api.{zone}
// on the public listeners.
package api
