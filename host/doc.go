// Package host is the host side of gatehouse discovery (DESIGN §4), and the
// one definition of its wire protocol: the bus subjects, their JSON bodies,
// the challenge request and response, and the exact bytes a host signs.
//
// An app that embeds it needs a bus connection, its Ed25519 key (enrolled
// for its host id through the control API) and the address the gateway
// reaches it at:
//
//	h, err := host.New(host.Options{Conn: nc, Cluster: "prod", HostID: "web-1",
//		Key: key, Apps: []string{"hello"}, Addr: "10.0.0.5:8080"})
//	srv := &http.Server{Addr: ":8080", Handler: h.Wrap(app),
//		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
//	go srv.ListenAndServe()
//	err = h.Run(ctx)       // announce, heartbeat, re-announce on reconnect, leave when ctx ends
//	srv.Shutdown(drainCtx) // after the leave: gateways stop picking this host, then drain
//
// The server's timeouts are the app's to choose; those above are the
// ones `gatehouse host` uses (and the gateway's own listeners): without
// them a client that opens connections and sends nothing, or leaves them
// idle, holds a goroutine and a socket each for as long as it likes.
//
// Run returns once its leave is on the bus (or after 2 s trying). Wait for
// it before the process exits: a host that exits with Run still going may
// never send its leave, and gateways keep routing requests to it until it
// has missed three heartbeats. It returns early, with an error saying
// why, if its bus connection closes under it (nats.go gave up on a
// refused credential, say): the host is then out of every gateway's pool
// within three heartbeats, so stop serving or reconnect.
//
// # Protocol
//
// A host publishes, with {c} its cluster id:
//
//	gatehouse.{c}.hosts.announce   Announce   on start and on every (re)connect
//	gatehouse.{c}.hosts.heartbeat  Heartbeat  every heartbeat interval (5 s), while connected
//	gatehouse.{c}.hosts.leave      Leave      once, when shutting down
//
// Every body is JSON of at most [MaxMessageSize] bytes; ts is unix seconds.
// A heartbeat carries a NATS reply subject, an inbox under "_INBOX.": a
// gateway that does not know the host (it started after the host
// announced, or it forgot the host after host_ttl), or whose last check of
// the host's claims failed (anyone may announce other claims in its name),
// answers on it, the latter at most once a heartbeat interval per inbox, and the
// host announces again. A reply subject outside "_INBOX." gets no answer.
// That answer is the only message a gateway sends a host over the bus.
//
// A gateway then proves the host holds its key at the address it announced:
// it POSTs a [ChallengeRequest] to {scheme}://{addr}[ChallengePath] and the
// host answers a [ChallengeResponse] whose signature is Ed25519 over
// [ChallengeMessage]. The nonce enters the signed message exactly as the
// text of the request's "nonce" field: standard base64 with padding, as
// sent, never decoded and re-encoded. The addr in the message is the
// address the host itself was configured to announce, never one taken from
// the request, so a signature obtained at one address proves nothing about
// another.
//
// A leave carries sig, Ed25519 over [LeaveMessage] (host id and ts) by the
// same key. Gateways drain a host only on a leave that verifies under the
// key the host last proved, with a ts within a minute of their clock,
// newer than the last leave they accepted for the host id and not from
// before the host's current run passed its challenge: anyone who may
// publish on the bus could otherwise take any host out of rotation. Two
// leaves of one key in one second are the same bytes, and the second is
// refused as a replay. A host that sends an unsigned leave is taken out by
// its missed heartbeats instead.
//
// Once Run starts to leave, the challenge handler answers 503: announces
// are unsigned, so anyone may republish a leaving host's announce, and a
// gateway ends a drain only on a challenge that passes after it; a
// leaving host must never pass one again.
//
// Keys are PKCS#8 PEM ("PRIVATE KEY"), the format of
// `openssl genpkey -algorithm ed25519`; public keys travel as standard
// base64 of the raw 32 bytes ([PublicKeyString]), which for such a file is
// `openssl pkey -in host.pem -pubout -outform DER | tail -c 32 | base64`.
package host
