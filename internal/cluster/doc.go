// Package cluster is the pure core of gatehouse's cluster affinity
// (DESIGN §5): who owns an app ([Owner], [Rendezvous], [Hash]), the set of
// known clusters a gateway routes by ([Set], [Holder]), the signed marks a
// gateway puts on a request it forwards to a peer ([SignClient],
// [VerifyClient], DESIGN §5.3) and the signed cluster announcements of
// gatehouse.clusters ([Announcement], DESIGN §5.1).
//
// Nothing here does I/O or reads a clock: membership comes from
// internal/peers, which probes and listens, and the request path
// (internal/gateway) reads a [Set] snapshot once per request.
package cluster
