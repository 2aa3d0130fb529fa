package proxy

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"slices"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
)

// Bytes a host sends after its answer, unasked, are never read as the
// answer to the next request on that connection (another client's,
// perhaps): a response queue poisoned so shifts every answer after it.
// The fast path looks before it sends (sock.Conn.AskIdle) and reads
// nothing behind its own back. net/http's transport reads on a
// goroutine of its own: bytes that come while a connection is idle are
// caught only if that goroutine gets to them before a request takes the
// connection from the pool, and bytes that came with the answer, in its
// buffer, only if it looks before the connection is handed on. A
// forged answer written 5 ms after the real one reached the next
// client.
//
// So the h1 transport's headConn follows where each answer ends, reading
// its framing as net/http's client does (a length, chunks, none for a
// HEAD, a 204 or a 304): bytes read past that end, before the next
// request is written, are cut off there and never handed to net/http,
// and every read after them fails (errUnsolicited), which closes the
// connection: an idle one at once; one a request just took fails that
// request's first read, which net/http sends again on a new connection
// when it may (a GET), else a 502. And the first write of a request on a
// reused connection looks at the socket first: a byte already there
// came before the request, and the write fails, nothing sent (net/http
// sends again what it may); so does a count of the bytes the socket
// received (Linux's tcpi_bytes_received) past those read when the answer
// ended, which sees bytes a reader took from the socket a moment before
// the look and has not handed over yet; and over TLS, a record the TLS
// layer read while no request was out (rawWatch). None of them sees
// what the TLS layer read with the answer and keeps until net/http's
// reader asks for more (plaintext after the answer's end in its record,
// a record after it in the same read of the socket): so over TLS the
// write also waits for that reader to have asked (awaitReader), which
// it does as soon as the connection is back in the pool; and a record
// then begun and not whole (records) came after the answer too, before
// the request, though every byte of it was read. An answer whose
// end is not known this way (read until the close, an upgrade, framing
// net/http refuses) is not followed: the connection keeps net/http's
// own look, or is not reused anyway.

// errUnsolicited fails a host's connection that sent bytes no request
// asked for.
var errUnsolicited = errors.New("proxy: the host sent bytes no request asked for")

// phase is where a headConn is in the answers.
type phase uint8

const (
	phaseIdle      phase = iota // no request out: any byte is unsolicited
	phaseHead                   // in the heads (cur is set)
	phaseLength                 // in a body of known length: left bytes
	phaseChunkSize              // at a chunk-size line
	phaseChunkData              // in a chunk's data: left bytes
	phaseChunkEnd               // at the CRLF after a chunk's data: left of 2
	phaseTrailer                // in a chunked body's trailer section
	phaseLost                   // not followed
)

// framing is the phase the final head just read begins (its fields are
// still c's), as net/http's client frames the answer.
func (c *headConn) framing() phase {
	closes := slices.Contains(c.names, "Close") || c.http1x == 0 && !slices.Contains(c.names, "Keep-Alive")
	switch {
	case c.http1x < 0 || c.status == http.StatusSwitchingProtocols || closes || c.clenBad:
		return phaseLost // not reused (net/http fails a bad length), or a tunnel
	case c.method == http.MethodHead || c.status == http.StatusNoContent || c.status == http.StatusNotModified:
		return c.ended()
	case c.http1x == 1 && c.chunked == 1:
		return phaseChunkSize
	case c.http1x == 1 && c.chunked != 0, c.clen < 0:
		return phaseLost // a coding net/http refuses, or read until the close
	case c.clen == 0:
		return c.ended()
	}
	c.left = c.clen
	return phaseLength
}

// ended is the phase after an answer's end.
func (c *headConn) ended() phase {
	c.reused, c.endN, c.drained = true, c.rawN, false
	return phaseIdle
}

// body takes what of b the phase covers outside the lines: it returns
// how many bytes, and whether scan goes on with the rest itself; -1 when
// b begins with bytes no request asked for (c is refused).
func (c *headConn) body(b []byte) (int, bool) {
	switch c.phase {
	case phaseIdle:
		c.refuse(errUnsolicited)
		return -1, false
	case phaseLength, phaseChunkData:
		k := int(min(int64(len(b)), c.left))
		if c.left -= int64(k); c.left == 0 {
			if c.phase == phaseLength {
				c.phase = c.ended()
			} else {
				c.phase, c.left = phaseChunkEnd, 2
			}
		}
		return k, true
	case phaseChunkEnd:
		k := 0
		for ; k < len(b) && c.left > 0; k++ {
			if b[k] != "\r\n"[2-c.left] {
				c.phase = phaseLost // net/http's client fails the body
				return k, true
			}
			c.left--
		}
		if c.left == 0 {
			c.phase = phaseChunkSize
		}
		return k, true
	case phaseLost:
		return len(b), true
	}
	return 0, false // phaseChunkSize, phaseTrailer: lines
}

// bodyLine takes a chunk-size line or a trailer line (without its LF),
// as net/http's client reads them.
func (c *headConn) bodyLine(line []byte) {
	switch c.phase {
	case phaseChunkSize:
		n, ok := chunkLineSize(line)
		switch {
		case !ok:
			c.phase = phaseLost // net/http's client fails the body
		case n == 0:
			c.phase = phaseTrailer
		default:
			c.phase, c.left = phaseChunkData, n
		}
	case phaseTrailer:
		if len(bytes.TrimSuffix(line, []byte("\r"))) == 0 {
			c.phase = c.ended()
		}
	}
}

// chunkLineSize reads a chunk-size line without its LF as readChunkSize
// does (and net/http's client): a CR ends it, blanks at its end are
// trimmed, an extension is cut off, and the size is hex.
func chunkLineSize(line []byte) (int64, bool) {
	if len(line) > readSize || len(line) == 0 || bytes.IndexByte(line, '\r') != len(line)-1 {
		return 0, false
	}
	size, _, _ := bytes.Cut(bytes.TrimRight(line[:len(line)-1], " \t"), []byte(";"))
	if len(size) == 16 && size[0] == '0' {
		size = size[1:]
	}
	return httpwire.ParseChunkSize(size)
}

// rawWatch is the TCP connection under a headConn's TLS: a read of
// records while c has no request out marks c dirty, so that the next
// request's write fails (the look at the socket finds nothing of what
// the TLS layer took).
type rawWatch struct {
	net.Conn
	c *headConn
}

func (r rawWatch) Read(p []byte) (int, error) {
	r.c.mu.Lock()
	if r.c.phase == phaseIdle && r.c.reused && !r.c.drained {
		// The TLS layer reads the socket only when it holds no record
		// whole and nothing decoded: all that came with the answer was
		// handed to c, which cut it off there.
		r.c.drained = true
		r.c.cond.Broadcast()
	}
	r.c.mu.Unlock()
	n, err := r.Conn.Read(p)
	if n > 0 {
		r.c.mu.Lock()
		r.c.records(p[:n])
		r.c.rawN += uint64(n)
		if r.c.phase == phaseIdle && r.c.reused {
			r.c.dirty = true
		}
		r.c.mu.Unlock()
	}
	return n, err
}

// records follows b, the next bytes read from raw, through their TLS
// records (5 bytes of header, the last two the body's length). When the
// reader has asked for what follows an answer (awaitReader), every
// record that came whole was decoded and handed over; one begun and not
// whole was sent after the answer, before the request: no look at the
// socket sees it, all its bytes read already. Under mu.
func (c *headConn) records(b []byte) {
	for len(b) > 0 {
		if c.recLeft > 0 {
			k := min(len(b), c.recLeft)
			c.recLeft, b = c.recLeft-k, b[k:]
			continue
		}
		switch c.recHdr {
		case 3:
			c.recLen = int(b[0]) << 8
		case 4:
			c.recLeft, c.recHdr = c.recLen|int(b[0]), -1
		}
		c.recHdr++
		b = b[1:]
	}
}

// Write writes a request (or the rest of one). The first write of the
// request begin announced starts the scan of its answer's heads, once a
// look at a reused connection found nothing the host sent before it.
func (c *headConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	switch {
	case c.await:
		c.await = false
		if c.reused && c.tls {
			c.awaitReader()
		}
		switch {
		case c.refused.Load():
		case c.reused && (c.dirty || c.recHdr > 0 || c.recLeft > 0 || c.look.arrived(c.raw, c.endN)):
			c.refuse(errUnsolicited)
		default:
			c.phase = phaseHead
			c.arm(c.next)
		}
		c.next = nil
	case c.phase == phaseIdle:
		c.phase = phaseLost // a request begin did not announce: not followed
	}
	c.mu.Unlock()
	if c.refused.Load() {
		return 0, c.why
	}
	return c.Conn.Write(p)
}

// awaitReader waits, over TLS, until net/http's reader has asked for the
// bytes after the last answer, unless it did already. What the TLS layer
// read with the answer (the rest of one record, a record after it in the
// same read of the socket) reaches c, and is found unsolicited, only
// when that reader asks; a request sent before would have it read as its
// answer. The reader asks as soon as it has put the connection back in
// the pool, so the wait is short; c refused, or closed, ends it. Under mu.
func (c *headConn) awaitReader() {
	if c.cond.L == nil {
		c.cond.L = &c.mu
	}
	c.waiting = true
	for !c.drained && !c.refused.Load() && !c.closed {
		c.cond.Wait()
	}
	c.waiting = false
}

// Close closes the connection, and ends a write's wait (awaitReader).
func (c *headConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.Conn.Close()
}
