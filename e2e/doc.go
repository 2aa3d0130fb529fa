// Package e2e holds the end-to-end tests of gatehouse: they build the real
// binary once and run it as separate processes, exactly as an operator
// would — `gatehouse serve` with its embedded NATS, two `gatehouse host`
// sidecars in front of test upstreams, `gatehouse ctl` and `gatehouse
// keygen` to enrol them — and drive them over loopback HTTP and signals.
//
// What they prove (issue 2 "How it is checked", issue 3 test list, DESIGN
// §2, §4 and §3 drain): requests routed by Host reach the upstream with the
// context headers and never with a client-sent X-Gatehouse-*; both hosts
// serve; SIGTERM to a host under load and SIGTERM to the gateway under load
// lose no in-flight request; a bad config stops `serve` with one line.
//
// The package has no non-test code; the tests live in *_test.go.
package e2e
