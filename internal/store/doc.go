// Package store keeps gatehouse's routing state in NATS JetStream
// key-value buckets and feeds it to the routing table (DESIGN §10): apps,
// custom domain mappings, zones, DNS records and host key enrolments, each
// a JSON value of its internal/route type. It also holds the shared
// certificate storage and ACME locks (DESIGN §9) behind [CertKV], which
// internal/tlsmgr adapts to certmagic.Storage.
//
// Usage:
//
//	st, err := store.Open(ctx, bus.JetStream(), store.Options{Logger: log})
//	go st.Run(ctx, builder) // initial load, then every change, checked every 30 s
//	err = st.PutApp(ctx, &route.App{ID: "hello", ...})
//
// Every gateway runs one Store on the same buckets; a change written by
// any of them reaches every gateway's table through its watchers (an
// ordered consumer per bucket, plus the server's republished copy of each
// write, so that losing the node that hosts a consumer does not stall the
// table). If NATS goes away, Run keeps the last table and keeps retrying.
// Run also sweeps away old delete markers, one gateway at a time (see
// sweep.go), so that deleted keys do not weigh on every load.
//
// Keys are escaped reversibly (see keys.go) so that any name, including
// "*" and "_acme-challenge", is a valid KV key.
package store
