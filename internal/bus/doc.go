// Package bus owns gatehouse's connection to NATS (DESIGN §3 "bus", §10):
// either an embedded nats-server with JetStream in the data directory, or
// one or several external NATS URLs. It hands the rest of gatehouse a
// *nats.Conn and a jetstream.JetStream and is the only package that
// imports nats-server.
//
// Usage:
//
//	b, err := bus.New(bus.Options{DataDir: dir, Logger: log}) // embedded on 127.0.0.1:4222
//	if err != nil { ... }
//	if err := b.Start(ctx); err != nil { ... }
//	defer b.Close()
//	st, err := store.Open(ctx, b.JetStream(), store.Options{})
//
// Embedded mode runs the server with NoSigs (gatehouse owns the signals)
// and a logger adapter whose Fatalf logs instead of exiting the process,
// and which bounds the lines any client can make the server write
// (logger.go).
//
// The embedded server is closed by default (auth.go): a client without
// credentials, as every host is, may publish only the hosts subjects and
// subscribe only to "_INBOX.>"; gateways authenticate as GatewayUser with
// the secret in DataDir/TokenFile, generated on first start. Every
// gateway connection uses InboxPrefix, so its JetStream replies never
// reach a host.
package bus
