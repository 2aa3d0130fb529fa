// Package peers discovers the active clusters a gateway routes by (DESIGN
// §5.1) and publishes them as a [cluster.Set] snapshot.
//
// Two sources are merged:
//
//   - the static list (config `clusters:`): each member is probed at
//     GET {url}/healthz every ProbeInterval (5 s);
//   - where the clusters share a bus: every gateway announces its own
//     cluster on gatehouse.clusters every AnnounceInterval (5 s), signed
//     with the cluster key, and a cluster is live while its announcements
//     keep coming (not after Misses intervals of silence). A cluster known
//     only from announcements is probed as well, at its announced URL.
//
// A probe succeeds only on a 200 that names the peer in
// X-Gatehouse-Cluster, without a redirect followed. Misses (3) failed
// probes in a row make a peer inactive whatever it announces: a gateway
// that hangs (accepts connections, never answers) goes on announcing, and
// every forward to it would wait out cluster.deadline. Otherwise a static
// member is active once a probe answers or it announces; an announced one
// while it announces. Self is always active. Until then a peer is
// inactive: the gateway serves locally (availability over affinity).
//
// # Trust model
//
// The static list is configuration and is trusted as written: its keys
// are the keys the gateway verifies forward marks with.
//
// An announcement proves only that its sender holds the private key of the
// public key inside it. So:
//
//   - for an id on the static list, an announcement counts only if it
//     carries that id's configured key (anything else is dropped and
//     logged); the static URL and key are kept either way;
//   - an announcement for self counts for nothing; with a key other than
//     ours it is logged as an impersonation attempt;
//   - an id the static list does not know is accepted on first use (unless
//     Options.StaticOnly), and its key is pinned for as long as the id is
//     remembered (ForgetAfter of silence): a different key for it is
//     dropped. Anyone who may publish on gatehouse.clusters can therefore
//     add a new cluster id: the bus is the trust boundary, exactly as for
//     hosts.announce, and must be protected by NATS credentials. Such a
//     cluster can receive forwards and failovers for the apps it comes to
//     own, and can vouch for client addresses of requests it forwards; it
//     can never speak for a configured cluster or for this one.
//
// A malformed, unsigned, stale (ts more than 30 s away) or distrusted
// announcement is dropped with a log line and changes nothing. When the
// bus is down, the static probes keep the set current; when nothing is
// known, the set is self alone and every app is served locally.
package peers
