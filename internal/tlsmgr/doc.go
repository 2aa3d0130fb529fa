// Package tlsmgr is the source of the gateway's TLS configuration and
// certificates (DESIGN §3 TLS posture, §9 certificates).
//
// [Manager.TLSConfig] returns the *tls.Config the https listener serves:
// TLS 1.2 minimum, key exchange preferring the hybrid post-quantum
// X25519MLKEM768 (Options.PQOnly: only that group, which also means TLS 1.3
// only), ALPN h2, http/1.1, http/1.0 and acme-tls/1. Its GetCertificate
// answers, in order: ACME TLS-ALPN-01 challenges; certificates certmagic
// holds (issued for the managed names, or on demand for custom domains
// that Options.Allow accepts, asked again at each handshake served from
// the cache, so a deleted mapping's certificate is no longer served); else
// the bootstrap certificate. A custom domain that Options.Allow answers
// with ErrNoNewOrder (a suspended app's) is served the certificate it
// has, cached or stored, while it is valid, and never ordered or renewed;
// one found without a valid certificate is not looked up in the storage
// again for heldMissWait (1 minute). A hello without SNI gets the ACME
// certificate of the first of Options.Names (gatehouse's *.{zone}) once
// it is held, as the default certificate; the bootstrap certificate until
// then. A custom domain whose on-demand order failed
// is served the bootstrap certificate, without ACME traffic, for a window
// that doubles from 1 minute to 1 hour (backoff.go). A custom domain's
// certificate due for renewal is served while the Manager renews it among
// the same background orders, not on the goroutine certmagic would start
// for it with a context of its own, which Run's does not reach: Run's end
// cancels the orders and renewals it runs.
//
// The bootstrap certificate is self-issued at New for the gateway's own
// names and lives 24 h (re-issued by Run at half-life), so the gateway
// serves TLS from its first second; ACME certificates replace it name by
// name as they arrive.
//
// ACME runs through certmagic with a certificate cache owned by the
// Manager (no certmagic global state). HTTP-01 is answered by
// [Manager.HTTPHandler] on the gateway's own http listener and TLS-ALPN-01
// by GetCertificate on its https listener. With Options.DNSProvider (the
// gateway's own DNS, libdns-shaped), the managed names, wildcard *.{zone}
// included, are validated by DNS-01 instead. Certificates and ACME locks live
// in a [KV] that the cluster shares (internal/store satisfies it), so every
// gateway serves the same certificates and only one orders each name.
//
// Post-quantum protection: with X25519MLKEM768 the session keys of a TLS 1.3
// connection resist a future quantum attacker recording today's traffic
// ("harvest now, decrypt later"). Authentication does not: certificate
// signatures (ECDSA/RSA from the ACME CA) remain classical in Go's TLS stack
// and in the Web PKI, so an attacker with a quantum computer at handshake
// time could impersonate the server. Passthrough apps negotiate with their
// own hosts; the edge pipes them only hellos that meet this posture (TLS
// 1.2 minimum; with PQOnly, X25519MLKEM768 over TLS 1.3) and otherwise
// leaves their key exchange alone.
package tlsmgr
