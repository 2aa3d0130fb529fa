//go:build race

package e2e

// raceEnabled: the test binary runs with the race detector, so the
// gatehouse binary under test is built with it too (a data race in a
// child then fails its exit status).
const raceEnabled = true
