// Package sock owns the gateway's plain TCP reads and writes on its hot
// connections (clients' HTTP/1.1, hosts' keep-alive pool) and the socket
// options of its listeners.
//
// Why: net.TCPConn enters every read and write through the runtime's
// syscall bookkeeping (entersyscall/exitsyscall), as if the call might
// block. On a non-blocking socket it never does, but a write that takes
// longer than sysmon's 20 µs tick (loopback TCP delivers to the peer in
// the writer's system call) has its P taken over by another thread: a
// futex wake, a context switch and a busier sysmon, per request. A Conn
// makes the same calls with RawSyscall through the connection's
// syscall.RawConn, so the runtime's netpoller still parks a read or write
// that would block and honours deadlines, but the calls themselves run as
// ordinary code. They are recvfrom(2) and sendto(2), not read(2) and
// write(2): on a socket those go through the file layer first (the
// file-position lock, fsnotify's hooks, the iterator wrappers) before
// they reach the same socket calls: ~130 ns a call on this kind of
// machine (bench/HISTORY.md, "Session 18"). sendto also says MSG_NOSIGNAL:
// a peer that is gone is an EPIPE, not a SIGPIPE for the runtime to
// swallow.
//
// Ask saves a read per exchange on the hosts' pool: the request is written
// by the read that waits for its answer, which then waits for readiness
// first instead of trying a read that, that soon after sending, finds
// nothing (EAGAIN) almost every time.
//
// Hold does the same for a client's connection in the other direction:
// the last writes of an answer (the lane's, or crypto/tls's records of
// it) are kept and written by the read that waits for the client's next
// request, which the client sends only once it has the answer, so that
// read need not try first either.
//
// Listen opens the edge's listening sockets with TCP keep-alive set on
// the listener, which Linux copies to each accepted connection, instead of
// the four setsockopt calls net makes after every accept.
//
// Linux only: elsewhere Wrap returns the connection as it is and Listen is
// net's. So does Wrap on 32-bit x86 before Linux 4.3, which has no
// recvfrom(2) or sendto(2) of their own there.
package sock
