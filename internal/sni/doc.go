// Package sni reads a TLS ClientHello off a fresh connection without
// consuming it (DESIGN §3, the https listener): [Peek] returns the parsed
// [Hello] (server name, ALPN protocols, supported groups and versions) and a
// [Conn] that replays every byte read so far, so the connection can still be
// handed to crypto/tls or piped raw to a passthrough host.
//
// The parser is gatehouse's own, over the raw TLS records: the hello may
// arrive fragmented across any number of TCP reads and TLS records. Input is
// bounded in size ([MaxHelloBytes]) and, through Peek's read deadline, in
// time. Anything truncated, oversized or malformed is a clean error, never a
// panic or a hang. FuzzParse drives it with real hellos from crypto/tls.
package sni
