// Package route owns gatehouse's routing table (DESIGN §2 step 3, §10): the
// zones, apps, custom domains and host pools that every request reads.
//
// The table is an immutable snapshot. [Live] publishes it with an atomic
// pointer swap; a request calls [Live.Load] once and uses that one table for
// its whole life, without locks. [Builder] is the single writer: the store
// watcher and host discovery feed it changes, and it publishes a new table
// after each one.
//
// Apps and custom domains live in a name index built for the request path
// (index.go) rather than in Go maps: a lookup of an app id of up to 16
// bytes reads one slot, a verified custom domain carries its app's entry
// in its slot, and a change copies only the part of the table it changes.
//
// [Conns] holds the connections that outlive the table they were routed
// by (passthrough pipes, upgraded connections) by app and host, and
// closes those whose app or host a new table takes out of service
// ([Table.Cuts]): a suspended app's or a revoked host's traffic stops,
// not only its new requests.
//
// The app settings types ([App], [CORS], [RateLimit], [Auth], [PolicyRule])
// are the JSON shapes the control API takes and the store keeps: one
// definition for the wire, the store and the request path.
package route
