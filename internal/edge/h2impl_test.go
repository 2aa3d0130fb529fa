package edge

import (
	"testing"
)

// h2Impl is an HTTP/2 server implementation the conformance tests run
// against (h2spec_test.go, h2conform_test.go). start runs an Edge with
// opts whose https listener serves HTTP/2 with that implementation, and
// stops it when t ends; everything the tests see goes through it.
//
// There are two: gatehouse's own (internal/h2), which serves h2 with the
// fast path on (the default), and net/http's, which serves it with
// DisableLane (listeners.fast_path = false). Every test below runs
// against both, and each must pass against each (the h2spec test has its
// own list of known failures per implementation: h2specKnown).
type h2Impl struct {
	name  string
	start func(t testing.TB, opts Options) *running
}

var h2Impls = []h2Impl{
	{name: "h2", start: func(t testing.TB, o Options) *running { o.DisableLane = false; return start(t, o) }},
	{name: "net/http", start: func(t testing.TB, o Options) *running { o.DisableLane = true; return start(t, o) }},
}

// forEachH2 runs f as a subtest for each implementation in h2Impls.
func forEachH2(t *testing.T, f func(t *testing.T, impl h2Impl)) {
	t.Helper()
	for _, impl := range h2Impls {
		t.Run(impl.name, func(t *testing.T) { f(t, impl) })
	}
}
