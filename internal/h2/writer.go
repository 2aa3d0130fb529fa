package h2

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// holdBody is how much of a response body the writer keeps before it
// sends anything: a response that fits goes out whole, HEADERS and DATA in
// one write, when the handler returns.
const holdBody = 4 << 10

// sendChunk bounds the body bytes one stream writes under the connection's
// write lock at a time.
const sendChunk = 64 << 10

// sniffLen is how much of a body http.DetectContentType looks at.
const sniffLen = 512

// responseWriter is the stream's http.ResponseWriter. Used by the
// handler's goroutine only (as net/http requires); done makes a write
// from a goroutine the handler left behind fail.
type responseWriter struct {
	st     *stream
	hdr    http.Header
	isHead bool
	done   atomic.Bool
	// active counts the calls in progress that may use block and hold
	// (enter): recycle gives the buffers to later streams only when none
	// is, so a call racing its handler's return (the handler's race, as
	// with net/http) still reaches only this response's bytes.
	active atomic.Int32

	status      int
	wroteHeader bool
	// The response's head, taken at WriteHeader and encoded when it goes
	// out (send): the handler's fields, then a content-length of length
	// (-1: none), a date when the handler set none, and a sniffed
	// content-type.
	fields   []field
	length   int64
	date     bool
	ctype    string
	block    []byte // the encoded head: the encoder's output buffer
	sniff    bool   // content-type is to be sniffed from the first bytes
	sent     bool   // block is on the wire
	clen     int64  // declared content-length; -1: none
	wrote    int64  // body bytes the handler wrote
	trailers []string
	hold     []byte // body bytes not yet sent
	err      error  // the first write error
	bufs     *outBufs
}

// outBufs are a response's buffers, kept between streams
// (stream.recycle): its fields, its header block, and a small body,
// written without allocating once the server has served a few.
type outBufs struct {
	fields      []field
	block, hold []byte
}

// maxKeptBlock and maxKeptFields bound the buffers kept for reuse.
const (
	maxKeptBlock     = 4 << 10
	maxKeptOutFields = 64
)

func (w *responseWriter) init(st *stream, isHead bool) {
	w.st, w.isHead, w.clen = st, isHead, -1
	w.hdr = st.cn.s.header(8)
}

var errAfterReturn = errors.New("h2: response written after its handler returned")

// Header returns the response's fields; after the handler has returned,
// a map of no consequence, so that a goroutine it left behind touches
// nothing the server reads.
func (w *responseWriter) Header() http.Header {
	if w.done.Load() {
		return http.Header{}
	}
	return w.hdr
}

// enter reports whether the handler's call may go on, the handler not
// having returned, and counts it in active until leave. It counts before
// it looks at done, and recycle sets done before it looks at active, so
// one of the two sees the other (see stream.recycle).
func (w *responseWriter) enter() bool {
	w.active.Add(1)
	if w.done.Load() {
		w.active.Add(-1)
		return false
	}
	return true
}

func (w *responseWriter) leave() { w.active.Add(-1) }

// WriteHeader takes the header fields as the map is now, as net/http
// does: changes after it reach only the trailers.
func (w *responseWriter) WriteHeader(code int) {
	if !w.enter() {
		return
	}
	defer w.leave()
	w.writeHeader(code)
}

func (w *responseWriter) writeHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 {
		if code != http.StatusSwitchingProtocols {
			w.informational(code)
		}
		return
	}
	w.wroteHeader, w.status = true, code
	h := w.hdr
	if v := h.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseUint(v, 10, 63); err == nil {
			w.clen = int64(n)
		}
	}
	for _, v := range h["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = textproto.TrimString(k); k != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(k))
			}
		}
	}
	if v, ok := h["Connection"]; ok && len(v) > 0 && strings.EqualFold(v[0], "close") {
		// net/http's meaning over HTTP/2: this stream ends, then the
		// connection (GOAWAY), refusing none the client has in flight.
		w.st.cn.goAwayGracefully()
	}
	_, hasType := h["Content-Type"]
	w.sniff = !hasType && h.Get("Content-Encoding") == "" && bodyAllowed(code)
	if w.bufs == nil {
		b, ok := w.st.cn.s.outs.Get().(*outBufs)
		if !ok {
			// A typical response's block and fields at once, not in
			// four growths.
			b = &outBufs{block: make([]byte, 0, 256), fields: make([]field, 0, 16)}
		}
		// hold is only appended to from here on: a body is written after
		// the final status.
		w.bufs, w.fields, w.block, w.hold = b, b.fields, b.block, b.hold
	}
	w.fields = takeFields(w.fields[:0], h)
	w.length = -1
	if w.clen >= 0 && bodyAllowed(code) {
		w.length = w.clen
	}
	_, hasDate := h["Date"]
	w.date = !hasDate
}

// headField reports whether a header map's field k goes into a response
// head: not a connection-specific field (HTTP/2 has no place for them; TE
// only in a request, RFC 9113 §8.2.2), nor Content-Length (the writer
// says the length itself), nor a trailer declared by prefix.
func headField(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Te", "Content-Length":
		return false
	}
	return !strings.HasPrefix(k, http.TrailerPrefix)
}

// takeFields appends h's fields to fs, leaving out what HTTP/2 has no
// place for (connection-specific fields) or the writer adds itself. Fields
// net/http would not send (invalid names or values) are left out when
// encoded.
func takeFields(fs []field, h http.Header) []field {
	for k, vs := range h {
		if !headField(k) {
			continue
		}
		for _, v := range vs {
			fs = append(fs, field{k: k, v: v})
		}
	}
	return fs
}

// encodeHead encodes w's head into w.block with the connection's encoder;
// under wmu, as the block goes out, for the table is the client's too.
func (w *responseWriter) encodeHead(cn *conn) {
	e := &cn.enc
	b := e.shrink(w.block[:0], cn.peerTable.Load())
	b = appendStatus(b, w.status)
	for _, f := range w.fields {
		b = e.appendField(b, f)
	}
	if w.length >= 0 {
		// The digits go through a buffer on the stack: a string of them
		// would be made on the heap for every length of 100 and up.
		var d [20]byte
		b = e.appendField(b, field{k: "content-length", v: string(strconv.AppendInt(d[:0], w.length, 10)), own: true})
	}
	if w.date {
		b = e.appendField(b, field{k: "date", v: cn.s.date.Text(), own: true})
	}
	if w.ctype != "" {
		b = e.appendField(b, field{k: "content-type", v: w.ctype, own: true})
	}
	w.block = b
}

// appendFields appends h's fields, leaving out what HTTP/2 has no place
// for (connection-specific fields) or the writer adds itself, and fields
// net/http would not send (invalid names or values).
func appendFields(b []byte, h http.Header) []byte {
	for k, vs := range h {
		if !headField(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			b = appendLowerField(b, k, v)
		}
	}
	return b
}

func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// informational sends a 1xx response at once (103 Early Hints, 100
// Continue).
func (w *responseWriter) informational(code int) {
	b := appendStatus(nil, code)
	b = appendFields(b, w.hdr)
	w.writeBlock(b, false)
}

// writeContinue sends 100 Continue for a body the handler began to read,
// unless the response's header block is on the wire. The body may be read
// on a goroutine of its own while the handler responds (a proxy streams
// an upload), so this looks only at sent, and under wmu.
func (w *responseWriter) writeContinue() {
	if !w.done.Load() {
		w.writeBlock(appendStatus(nil, http.StatusContinue), true)
	}
}

// writeBlock sends a 1xx header block by itself and flushes; early: only
// while the final header block is not on the wire.
func (w *responseWriter) writeBlock(b []byte, early bool) {
	cn := w.st.cn
	if w.reset() != nil {
		return
	}
	cn.wmu.Lock()
	if cn.werr == nil && !(early && w.sent) {
		cn.werr = cn.writeHeaders(w.st.id, b, false, cn.frameSize())
	}
	cn.unlockWrite()
}

func (w *responseWriter) reset() error {
	cn := w.st.cn
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if w.st.reset {
		return w.st.resetErr
	}
	return nil
}

// writeHeaders writes a header block of literals (an interim response's,
// trailers) of stream id; under wmu, so that a table size update goes at
// the start of the first block on the wire after the client lowered
// SETTINGS_HEADER_TABLE_SIZE below our table's size: RFC 7541 §4.2
// requires it (nghttp2 fails the connection without it).
func (cn *conn) writeHeaders(id uint32, b []byte, end bool, maxFrame int) error {
	if u := cn.enc.shrink(nil, cn.peerTable.Load()); u != nil {
		b = append(u, b...)
	}
	return writeHeaders(cn.wf, id, b, end, maxFrame)
}

// writeHeaders writes a header block as HEADERS and CONTINUATION frames
// of at most maxFrame bytes.
func writeHeaders(f *http2.Framer, id uint32, b []byte, end bool, maxFrame int) error {
	first := b
	if len(first) > maxFrame {
		first = b[:maxFrame]
	}
	b = b[len(first):]
	err := f.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(b) == 0})
	for err == nil && len(b) > 0 {
		frag := b
		if len(frag) > maxFrame {
			frag = b[:maxFrame]
		}
		b = b[len(frag):]
		err = f.WriteContinuation(id, len(b) == 0, frag)
	}
	return err
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.enter() {
		return 0, errAfterReturn
	}
	defer w.leave()
	return w.write(p)
}

func (w *responseWriter) write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.clen >= 0 && w.wrote+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	w.wrote += int64(len(p))
	if w.isHead {
		if w.sniff && len(w.hold) < sniffLen {
			// Kept only to sniff the Content-Type the GET would have.
			w.hold = append(w.hold, p[:min(len(p), sniffLen-len(w.hold))]...)
		}
		return len(p), nil
	}
	if len(w.hold)+len(p) <= holdBody {
		w.hold = append(w.hold, p...) // sized by the first write: most bodies are one
		return len(p), nil
	}
	if err := w.send(p, false, nil); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *responseWriter) WriteString(s string) (int, error) {
	if !w.enter() {
		return 0, errAfterReturn
	}
	defer w.leave()
	// A string that fits goes to hold without a copy to a []byte first.
	if w.wroteHeader && w.err == nil && bodyAllowed(w.status) && !w.isHead &&
		len(w.hold)+len(s) <= holdBody && (w.clen < 0 || w.wrote+int64(len(s)) <= w.clen) {
		w.hold = append(w.hold, s...)
		w.wrote += int64(len(s))
		return len(s), nil
	}
	return w.write([]byte(s))
}

// Flush sends what is held (and the header block) now.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController.
func (w *responseWriter) FlushError() error {
	if !w.enter() {
		return errAfterReturn
	}
	defer w.leave()
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	return w.send(nil, false, nil)
}

// finish ends the response once the handler has returned (and done is
// set): what is held, the trailers, END_STREAM.
func (w *responseWriter) finish() {
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	if w.err != nil {
		return
	}
	trailers, prefixed := w.trailerBlock()
	if !w.sent && w.clen < 0 && bodyAllowed(w.status) && len(w.trailers) == 0 && !prefixed && (w.wrote > 0 || !w.isHead) {
		// The whole body is known: say how long it is, as net/http does.
		w.length = w.wrote
	}
	_ = w.send(nil, true, trailers)
}

// trailerBlock encodes the trailers the handler set, if any, and reports
// whether a field was named with http.TrailerPrefix (a trailer promised,
// whatever its value), in one walk of the header map.
func (w *responseWriter) trailerBlock() (b []byte, prefixed bool) {
	for _, k := range w.trailers {
		for _, v := range w.hdr[k] {
			if httpguts.ValidHeaderFieldValue(v) && httpguts.ValidTrailerHeader(k) {
				b = appendLowerField(b, k, v)
			}
		}
	}
	for k, vs := range w.hdr {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok {
			continue
		}
		prefixed = true
		if httpguts.ValidHeaderFieldName(name) && httpguts.ValidTrailerHeader(http.CanonicalHeaderKey(name)) {
			for _, v := range vs {
				if httpguts.ValidHeaderFieldValue(v) {
					b = appendLowerField(b, http.CanonicalHeaderKey(name), v)
				}
			}
		}
	}
	return b, prefixed
}

// send writes the header block if it is not on the wire yet, then hold
// and p as DATA, within the client's windows, and flushes; end ends the
// stream (after trailers, an encoded block, if any).
func (w *responseWriter) send(p []byte, end bool, trailers []byte) error {
	st, cn := w.st, w.st.cn
	if !w.sent && w.sniff {
		first := w.hold
		if len(first) == 0 {
			first = p
		}
		if len(first) > 0 {
			w.ctype = http.DetectContentType(first)
		}
		w.sniff = false
	}
	data := [2][]byte{w.hold, p}
	left := len(w.hold) + len(p)
	if w.isHead {
		data, left = [2][]byte{}, 0
	}
	endData := end && len(trailers) == 0
	ended := false
	for {
		// Window first, without the write lock: a stream whose client
		// keeps its window shut waits alone. The header block is not
		// flow controlled: when there is no window for the body yet, it
		// goes out by itself first, for a client may open the window
		// only once it has seen it.
		n := 0
		if left > 0 {
			var err error
			// At most sendChunk at a time: the lock is let go between
			// chunks, so that one handler's large Write does not hold
			// every other stream of the connection until the client has
			// taken it all (net/http's server interleaves frame by frame).
			if n, err = st.take(min(left, sendChunk), w.sent); err != nil {
				w.err = err
				return err
			}
		}
		cn.mu.Lock()
		if st.reset {
			// Nothing more goes out on a reset stream (RFC 9113 §5.1),
			// not even the HEADERS of a bodiless response; what take
			// reserved goes back to the connection.
			cn.sendWin += int64(n)
			cn.wakeConnWaiterLocked() // a stream may wait for it; the client sends no more for it
			err := st.resetErr
			cn.mu.Unlock()
			w.err = err
			return err
		}
		if end && n == left {
			st.releaseLocked() // this write ends the stream (see release)
		}
		cn.mu.Unlock()
		cn.wmu.Lock()
		maxFrame := cn.frameSize() // under wmu: see conn.peerMaxFrame
		err := cn.werr
		if err == nil && !w.sent {
			ended = endData && left == 0
			w.encodeHead(cn)
			err = writeHeaders(cn.wf, st.id, w.block, ended, maxFrame)
			w.sent = true
		}
		frames := int64(0)
		for err == nil && n > 0 {
			d := &data[0]
			if len(*d) == 0 {
				d = &data[1]
			}
			m := min(n, maxFrame, len(*d))
			left -= m
			n -= m
			ended = endData && left == 0
			err = cn.wf.WriteData(st.id, ended, (*d)[:m])
			*d = (*d)[m:]
			frames++
		}
		if frames > 0 {
			cn.dataOut.Add(frames) // the client's allowance of WINDOW_UPDATEs (windowUpdatesFree)
		}
		if err == nil && left == 0 && end && !ended {
			if len(trailers) > 0 {
				err = cn.writeHeaders(st.id, trailers, true, maxFrame)
			} else {
				err = cn.wf.WriteData(st.id, true, nil)
			}
		}
		if err != nil && cn.werr == nil {
			cn.werr = err
		}
		cn.unlockWrite()
		if err != nil {
			w.err = err
			return err
		}
		if left == 0 {
			w.hold = w.hold[:0]
			return nil
		}
	}
}
