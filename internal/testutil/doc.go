// Package testutil starts the real things that tests of two or more
// packages need: an embedded NATS server with JetStream (alone or as a
// 3-node cluster), an upstream DNS resolver on loopback, polling waits in
// place of sleeps, a test server's life from its start to the test's end,
// a buffer that goroutines may write to while the test reads it, the
// heap reading of memory benchmarks, and the receive windows an HTTP/2
// server advertises with the held upload they must leave room beside, and
// a host that answers an upload before it has read it all. It is imported
// by tests only.
package testutil
