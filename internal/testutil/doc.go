// Package testutil starts the real things that tests of two or more
// packages need: an embedded NATS server with JetStream (alone or as a
// 3-node cluster), and polling waits in place of sleeps. It is imported by
// tests only.
package testutil
