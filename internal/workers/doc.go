// Package workers owns goroutines that outlive one task: the edge's
// accepted connections, its HTTP/2 requests' handlers and the lane's
// resumed connections run on a goroutine that finished its last task and
// waited for the next, rather than on a fresh one each.
//
// Why: a fresh goroutine starts with a small stack and grows it, copying
// every frame at each doubling, through whatever the task runs — a
// ClientHello and a dial, a TLS handshake, the gateway's handler chain.
// runtime.morestack was ~4.5-5.7 % of gatehouse's CPU per new passthrough
// connection; a reused goroutine grew its stack once.
//
// A Pool keeps at most a bounded number of goroutines waiting, each for a
// bounded time, so a burst of tasks does not leave a grown stack behind
// per task. Its owner's WaitGroup counts every goroutine it starts; Stop
// ends the waiting ones, and busy ones end after their task.
package workers
