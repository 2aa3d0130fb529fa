// Package gcfloor keeps Go's garbage collector from running on a small
// heap. A gateway's live heap is small (a few MB with a small route
// table) while it allocates a few KB per request, so with the default
// pacing (collect when the heap doubles, and at 4 MB at the least) it
// collects dozens of times a second under load, and each collection's
// fixed work (stopping the world, waking mark workers, scanning every
// goroutine's stack) costs the requests around it: about 8 % of the CPU
// per request in the load harness (BENCHMARKS.md).
//
// A [Floor] holds the collector's heap goal at or above a number of bytes
// by raising GOGC after each collection while the live heap is small,
// and giving back the GOGC in force when it started (100, or the
// environment's) once the live heap is large enough that the ordinary
// goal is above the floor. It is a floor only: a GOMEMLIMIT still bounds
// the heap, and GOGC=off is left alone.
//
// GOGC is the process's, so a process should run one Floor: cmd/gatehouse
// starts it for serve and demo, not the gateway package (tests run many
// gateways in one process).
package gcfloor
