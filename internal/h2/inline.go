package h2

import "time"

// Inline handlers. Handing a request from the reading goroutine to a
// handler's costs a goroutine wake-up (and, on an idle P, a thread's) per
// request: 4-8 % of an HTTP/2 request's CPU in the load harness. A
// connection whose requests come one at a time (most of a proxy's
// clients, and every h2load connection) gains nothing from the second
// goroutine, so a bodiless request that is its connection's only open
// stream runs on the reading goroutine itself. Nothing reads the
// connection meanwhile, so the reading moves on to a pooled goroutine
// (conn.moveReading) the moment it is needed:
//   - before the handler's writer waits for flow-control window, which
//     only a reader can open (stream.take);
//   - when the client has sent anything, a frame or its end: the server's
//     watcher looks at each inline connection's socket every peekEvery,
//     without reading it (a MSG_PEEK through internal/sock);
//   - once the handler has run for inlineMax, whatever the look says. A
//     look cannot see bytes crypto/tls has already read from the socket
//     (records that came in one read with the request's), and loneFirst
//     keeps connections that open streams side by side out, but a client
//     that turns to doing so may have its next HEADERS, a PING or a
//     RST_STREAM sit there that long.
//
// So a client's frame waits at most about peekEvery (inlineMax where
// the look is blind) while a request runs inline, and nothing else
// changes: the handler, its writes and its stream are those of a pooled
// handler.

// pender is a connection that can tell, without reading, whether the
// client has sent anything not yet read (internal/sock's Conn, through
// the edge's wrappers).
type pender interface{ Pending() bool }

// loneFirst is how many requests in a row a connection must send one at
// a time before its requests run inline: a client that opens streams side
// by side (a browser loading a page) has a burst's HEADERS read together,
// and once some sit in crypto/tls's buffer no look at the socket sees
// them.
const loneFirst = 2

// The watcher's pace and the bound (Options.peekEvery, .inlineMax).
// Measured in the load harness: a look every 2 ms per connection (a
// timer each) cost what running inline saved; one watcher for the server
// costs a tick for all of them.
const (
	defaultPeekEvery = 5 * time.Millisecond
	defaultInlineMax = 20 * time.Millisecond
	// watchIdle is how many ticks in a row the watcher finds no inline
	// connection before it stops (the next inline handler starts it).
	watchIdle = 100
)

// serveInline runs st's handler on the reading goroutine. When the
// reading has moved on meanwhile, it returns errMoved: this goroutine
// ends with the handler, and another reads the connection.
func (cn *conn) serveInline(st *stream) error {
	cn.hb.done() // the stream copied what it keeps of the block
	// Only now may the watcher move the reading on: the block reader is
	// the next reader's once done (busy's store orders the two).
	cn.busy.Store(true)
	if !cn.listed {
		cn.s.list(cn)
	}
	if !cn.s.watchOn.Load() {
		cn.s.startWatch()
	}
	st.serve() // st may be the next stream's after this
	cn.mu.Lock()
	moved := cn.moved
	cn.inline, cn.moved = nil, false
	cn.busy.Store(false)
	cn.mu.Unlock()
	if moved {
		return errMoved
	}
	return nil
}

// moveReading hands the connection's reading to a pooled goroutine if st
// is running inline. Only once serveInline has given the block reader
// back (busy): the watcher picks st under the locks and moves it after
// letting them go, and by then st's handler may have ended and st,
// pooled, be the next request's, set inline by the reader that has not
// yet given the block back; a reader started then would decode the next
// header block into it meanwhile (a data race -race reported in
// TestManySmallDownloads).
func (cn *conn) moveReading(st *stream) {
	cn.mu.Lock()
	if st == nil || cn.inline != st || !cn.busy.Load() {
		cn.mu.Unlock()
		return
	}
	cn.inline, cn.moved = nil, true
	cn.busy.Store(false)
	cn.mu.Unlock()
	cn.s.readers.Go(cn)
}

// readOn reads the connection from where an inline handler left off (a
// readers pool goroutine).
func (cn *conn) readOn() {
	err := cn.loop()
	if err == errMoved {
		return
	}
	cn.end(err)
}

// list adds cn, at its first inline handler, to the connections the
// watcher looks at; it stays there until it ends (unlist), so that a
// request costs no server-wide lock: the watcher skips the connections
// not busy with one.
func (s *Server) list(cn *conn) {
	s.imu.Lock()
	cn.listed, cn.at = true, len(s.inl)
	s.inl = append(s.inl, cn)
	s.imu.Unlock()
}

// unlist takes an ended connection out of the watcher's list.
func (s *Server) unlist(cn *conn) {
	s.imu.Lock()
	last := len(s.inl) - 1
	s.inl[cn.at] = s.inl[last]
	s.inl[cn.at].at = cn.at
	s.inl[last] = nil
	s.inl = s.inl[:last]
	cn.listed = false
	s.imu.Unlock()
}

// startWatch starts the watcher unless it runs, or Close has stopped it.
func (s *Server) startWatch() {
	s.imu.Lock()
	if !s.watchOn.Load() && !s.quitted {
		s.watchOn.Store(true)
		s.wg.Add(1)
		go s.watch()
	}
	s.imu.Unlock()
}

// watch looks, every peekEvery, at each connection running a handler
// inline, and moves its reading on if the client has sent anything or
// the handler has run for inlineMax. It stops after watchIdle ticks with
// none, or when Close has ended every connection.
func (s *Server) watch() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.peekEvery)
	defer t.Stop()
	bound := uint64((s.opts.inlineMax + s.opts.peekEvery - 1) / s.opts.peekEvery)
	var move []*conn
	var sts []*stream
	for idle := 0; ; {
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
		now := s.epoch.Add(1)
		busy := false
		s.imu.Lock()
		for _, cn := range s.inl {
			if !cn.busy.Load() {
				continue
			}
			busy = true
			cn.mu.Lock()
			st := cn.inline
			if st != nil && (now-cn.since > bound || cn.pend.Pending()) {
				move, sts = append(move, cn), append(sts, st)
			}
			cn.mu.Unlock()
		}
		if busy {
			idle = 0
		} else if idle++; idle >= watchIdle {
			// A handler that goes inline now sees watchOn false (it is
			// set under imu) and starts another.
			s.watchOn.Store(false)
			s.imu.Unlock()
			return
		}
		s.imu.Unlock()
		for i, cn := range move {
			cn.moveReading(sts[i])
			move[i], sts[i] = nil, nil
		}
		move, sts = move[:0], sts[:0]
	}
}
