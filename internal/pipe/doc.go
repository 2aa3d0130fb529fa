// Package pipe is the L4 passthrough of DESIGN §3: once the https listener
// has peeked a ClientHello for an app in passthrough mode, [Join] copies
// bytes both ways between the client and a verified host, which terminates
// TLS itself. The gateway never sees plaintext.
//
// The copy is io.Copy between the raw *net.TCPConn values, which Linux runs
// as splice(2): the payload does not cross into user space. The peeked hello
// is written to the host first, then the raw connections take over. Half
// close is honoured (EOF one way becomes CloseWrite on the other), and an
// error either way closes both sides at once, so a host that dies mid-pipe
// closes the client promptly. The host-to-client copy runs on Join's
// caller; the other on a goroutine Join owns and joins before it returns.
//
// A pipe can be given an idle timeout. Splice does not say when it last
// moved a byte, so the client socket is asked instead (TCP_INFO: when it
// last received or sent data), once per timeout period, by a timer Join
// stops before it returns.
//
// Go's splice holds a kernel pipe while it waits for bytes. A direction
// quiet for 2 s gives it back and waits for its next byte by peeking
// (MSG_PEEK) instead, so an idle passthrough pipe holds its two sockets
// and nothing more.
package pipe
