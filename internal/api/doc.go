// Package api serves gatehouse's /api/v3 (DESIGN §7): JSON only, public
// read routes for anyone, control routes for the platform alone.
//
// Every control route checks the platform credential — the static control
// token or, through [Options.VerifyPlatform], a bearer JWT with scope
// platform — before it looks at the method or the body, and answers 401 to
// anyone else, whatever the route, method or body; an address that has
// sent too many wrong tokens gets 429 instead ([Options.BadTokens]).
// Every body is decoded strictly (unknown fields, repeated keys and keys
// in another case than the field's refused, 1 MiB cap) and validated in
// full before anything is written to the store, so bad input changes
// nothing; a query field a route does not take is refused (400) too,
// but for the cache-buster _, which every GET and HEAD takes and ignores. An item's GET body is a body its PUT takes: the names the path
// gives may be repeated and must agree with it, and a domain mapping's
// token and verified, which the gateway sets, only as they are stored.
//
// A write that would hand what one app proved or was given to another
// answers 409 naming what stands in the way, and changes nothing:
// deleting an app that a domain mapping or host key still names (the next
// app of that id would inherit them); a zone at or over a mapped custom
// domain (an app named after the domain's first label would take its
// traffic, since {app}.{zone} is looked up first); a PUT moving a
// verified domain mapping to another app (it would cut off the app that
// proved it; DELETE the mapping first). For the same reason a domain
// mapping or a host key may name only apps that exist (400 otherwise),
// and one whose app is deleted while it is written is taken back (409).
//
// Every item answered (an app, domain mapping, zone, record set or host
// key) carries an ETag, a digest of its stored form; a PUT, DELETE or
// verify with If-Match or If-None-Match is checked and written in one
// compare-and-set of the store, and answers 412 with nothing written when
// the condition fails, so two writers cannot lose each other's changes
// (cond.go). A GET with a matching If-None-Match answers 304. A list has
// no ETag: a GET of one with If-Match naming tags answers 412.
//
//	a, err := api.New(api.Options{Store: st, NotFound: store.ErrNotFound, ControlToken: tok})
//	mux.Handle("/api/v3/", a)
//
// A list route answers its whole list, or with ?limit=N&after=CURSOR one
// page of it with "next", the cursor of the following page; whole lists
// and pages take turns, a few at a time, to bound memory (page.go).
//
// The resolve routes (DESIGN §8) answer from the gateway's own zones in
// the DNS-over-HTTPS JSON shape, to a signed-in session only
// ([Options.VerifySession]): GET /api/v3/dns/resolve?name=&type= answers
// one object; POST /api/v3/dns/resolve/batch takes a JSON array of 1 to 10
// {"name","type"} queries and answers an array in the same order. Every
// query costs one unit of the client address's window
// (X-RateLimit-Limit/Remaining/Reset), of the session's own window
// (X-RateLimit-Identity-Limit/Remaining/Reset) and of its daily quota,
// charged all or none under one lock; over any of them: 429 with
// Retry-After, and nothing spent. HEAD /api/v3/dns/resolve answers GET's
// status and those fields, but resolves nothing and spends nothing: its
// Remaining counts are the budget as it stands, one more than a GET's
// at that moment, which counts its own unit. The
// platform credential is a session
// too. A name outside every zone is Status 5 (REFUSED), except when
// recursion is configured ([Options.Forwarder]) and the request carries
// the platform credential: then it is the upstreams' answer. RA says
// whether recursion was offered: true on every answer to the platform
// while it is configured, false to everyone else.
//
// The handler is mounted on the management listener and under api.{zone}
// on the public listeners.
package api
