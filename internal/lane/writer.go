package lane

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"golang.org/x/net/http/httpguts"
)

// writer is the lane's http.ResponseWriter, reused across a connection's
// requests. It follows net/http's server decision for decision (see
// chunkWriter.writeHeader in net/http/server.go): the head is the header
// map as it stood at WriteHeader (or, if the handler never called Header
// before, at the first flush); a handler that finishes within 2 KiB
// without a declared length gets one; a longer or flushed body without
// one is chunked; Date, a sniffed Content-Type and Connection: close are
// added as net/http adds them. Only the header order differs: net/http
// sorts, the lane writes in map order.
type writer struct {
	cn  *conn
	bw  *out
	hdr http.Header

	head       bool // a HEAD request: writes are counted, not sent
	wantsClose bool // the client asked to close, or drain began
	calledHdr  bool // Header was called before WriteHeader
	status     int  // the final status, 0 until WriteHeader
	snapped    bool // snap holds the head's fields
	committed  bool // the head is in cn.bw
	chunked    bool
	clen       int64 // declared or computed length; -1 unknown
	written    int64
	closeAfter bool
	err        error // the first write error: the client is gone
	trailers   []string
	// held is body bytes held before the head is committed. Its array
	// (bufferBeforeChunking bytes) lives apart from the writer and is
	// kept across requests, so that resetting the writer does not clear it.
	held []byte
	snap []field
	body *body // the request's; nil when it has none
	// duplex: the handler reads the body while it answers (EnableFullDuplex),
	// so what it has not read yet is left to it as the head goes out.
	duplex bool

	// The snapshot's fields that decide the framing, recorded by
	// takeSnap: first values, and whether each field is there.
	te, cl, conn, ce          string
	teField, clField, ctField bool
	dateField, trailerFields  bool
}

// field is one header of the response head.
type field struct {
	k    string
	v    []string
	gone bool
}

// bufferBeforeChunking is net/http's: a response this short and finished
// goes out with a Content-Length instead of chunked.
const bufferBeforeChunking = 2048

var _ http.ResponseWriter = (*writer)(nil)

func (w *writer) reset(head, wantsClose bool) {
	clear(w.hdr)
	clear(w.snap)
	held := w.held[:0]
	if cap(held) < bufferBeforeChunking {
		held = make([]byte, 0, bufferBeforeChunking)
	}
	*w = writer{cn: w.cn, bw: w.bw, hdr: w.hdr, head: head, clen: -1, wantsClose: wantsClose, trailers: w.trailers[:0], snap: w.snap[:0], held: held}
}

func (w *writer) Header() http.Header {
	w.calledHdr = true
	return w.hdr
}

// WriteHeader sends a 1xx at once (the current header map with it, as
// net/http does); a final status is held until the first body byte, a
// flush, or the handler's return.
func (w *writer) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.status != 0 {
		return // superfluous, as net/http logs and ignores
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeStatus(code)
		for k, vs := range w.hdr {
			if k != "Content-Length" && k != "Transfer-Encoding" {
				w.writeField(k, vs)
			}
		}
		_, _ = w.bw.WriteString("\r\n")
		w.noteErr(w.bw.Flush())
		return
	}
	w.status = code
	if w.calledHdr {
		w.takeSnap()
	}
	if v := w.hdr["Content-Length"]; len(v) > 0 && v[0] != "" {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			w.clen = n
		} else {
			delete(w.hdr, "Content-Length") // the snapshot keeps it; commit drops it
		}
	}
}

// takeSnap copies the header map into snap and records, in the same
// pass, the fields that decide the framing.
func (w *writer) takeSnap() {
	w.snapped = true
	for k, v := range w.hdr {
		f := field{k: k, v: v}
		switch k {
		case "Transfer-Encoding":
			w.te, w.teField = first(v), true
		case "Content-Length":
			w.cl, w.clField = first(v), true
		case "Connection":
			w.conn = first(v)
		case "Content-Type":
			w.ctField = true
		case "Content-Encoding":
			w.ce = first(v)
		case "Date":
			w.dateField = true
		case "Trailer":
			for _, s := range v {
				w.trailerFields = true
				for tok := range strings.SplitSeq(s, ",") {
					// As net/http declares them: never a field RFC 9110
					// §6.5.1 keeps out of trailers (framing, routing,
					// authentication), which a host behind the proxy
					// could otherwise name.
					if tok = textproto.TrimString(tok); tok != "" {
						if k := textproto.CanonicalMIMEHeaderKey(tok); httpguts.ValidTrailerHeader(k) {
							w.trailers = append(w.trailers, k)
						}
					}
				}
			}
		default:
			if strings.HasPrefix(k, http.TrailerPrefix) {
				f.gone, w.trailerFields = true, true // sent after the body, not in the head
			}
		}
		w.snap = append(w.snap, f)
	}
}

func (w *writer) bodyAllowed() bool {
	return w.status >= 200 && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		// Like net/http, hold the first 2 KiB: the head may yet get a
		// length (the handler may finish) or a sniffed type. With both
		// known already there is nothing to wait for.
		if len(w.held)+len(p) <= bufferBeforeChunking && (w.clen < 0 || w.sniffs()) {
			w.held = append(w.held, p...) // for HEAD too: the length and the sniffed type
			return len(p), nil
		}
		if len(w.held) == 0 {
			w.commit(false, p)
			if !w.head {
				w.writeBody(p)
			}
			return w.result(len(p))
		}
		w.commit(false, nil)
	}
	if !w.head {
		w.writeBody(p)
	}
	return w.result(len(p))
}

func (w *writer) result(n int) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

// sniffs reports whether the head will need a sniffed Content-Type.
func (w *writer) sniffs() bool {
	if !w.snapped {
		h := w.hdr
		_, ct := h["Content-Type"]
		return !ct && h.Get("Transfer-Encoding") == "" && h.Get("Content-Encoding") == ""
	}
	return !w.ctField && w.te == "" && w.ce == ""
}

// writeBody writes p in the response's framing.
func (w *writer) writeBody(p []byte) {
	if len(p) == 0 {
		return
	}
	bw := w.bw
	if w.chunked {
		var b [20]byte
		_, _ = bw.Write(strconv.AppendInt(b[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.noteErr(err)
		return
	}
	_, err := bw.Write(p)
	w.noteErr(err)
}

func (w *writer) noteErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
	}
}

// Flush sends the head (chunked, unless a length was declared) and what
// is written so far.
func (w *writer) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController calls.
func (w *writer) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	w.noteErr(w.bw.Flush())
	return w.err
}

// EnableFullDuplex is http.ResponseController's, as net/http's: the
// unread rest of the body is no longer read and dropped as the head goes
// out, but after the handler returns (conn.exchange): a proxy still
// sending the upload on as its host's answer comes would otherwise lose
// what was dropped, and its host get the upload cut short.
func (w *writer) EnableFullDuplex() error {
	w.duplex = true
	return nil
}

// SetWriteDeadline and SetReadDeadline serve http.ResponseController.
func (w *writer) SetWriteDeadline(t time.Time) error { return w.cn.c.SetWriteDeadline(t) }
func (w *writer) SetReadDeadline(t time.Time) error  { return w.cn.c.SetReadDeadline(t) }

// finish completes the response after the handler returned.
func (w *writer) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true, nil)
	}
	if w.chunked {
		bw := w.bw
		_, _ = bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			if vs := w.hdr[k]; len(vs) > 0 {
				w.writeField(k, vs)
			}
		}
		for k, vs := range w.hdr {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && name != "" {
				w.writeField(name, vs)
			}
		}
		_, err := bw.WriteString("\r\n")
		w.noteErr(err)
	}
	if w.clen >= 0 && w.written < w.clen && w.bodyAllowed() && !w.head {
		w.closeAfter = true // the client waits for bytes that will not come
	}
}

// first is a field's first value, or "".
func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func (w *writer) del(k string) {
	for i := range w.snap {
		if w.snap[i].k == k {
			w.snap[i].gone = true
		}
	}
}

// commit writes the head, deciding the framing. done says the handler
// has returned (so what is held is the whole body); p, when nothing is
// held, is the first body write (what a type is sniffed from).
func (w *writer) commit(done bool, p []byte) {
	w.committed = true
	if !w.snapped {
		w.takeSnap()
	}
	if w.cn.s.draining.Load() {
		w.wantsClose = true
	}
	if len(w.held) > 0 {
		p = w.held
	}
	te, cl, conn, ce := w.te, w.cl, w.conn, w.ce
	hasTE := te != ""
	hasCLField := w.clField && cl != ""
	trailers := w.trailerFields
	var setCL, setTE, setCT, setConn string
	if done && !trailers && !hasTE && w.bodyAllowed() && !hasCLField && (!w.head || len(p) > 0) {
		w.clen = int64(len(p))
		setCL = strconv.FormatInt(w.clen, 10)
	}
	hasCL := w.clen != -1
	if w.wantsClose || conn == "close" {
		w.closeAfter = true
	}
	if w.bodyAllowed() {
		if ce == "" && !w.ctField && !hasTE && len(p) > 0 {
			setCT = http.DetectContentType(p)
		}
	} else {
		if w.status == http.StatusNotModified {
			w.del("Content-Type")
		}
		w.del("Content-Length")
		w.del("Transfer-Encoding")
	}
	if hasCL && hasTE && te != "identity" {
		w.del("Content-Length")
		hasCL = false
	}
	switch {
	case w.head || !w.bodyAllowed():
		w.del("Transfer-Encoding")
	case hasCL:
		if w.teField {
			w.del("Transfer-Encoding")
		}
	case hasTE && te == "identity":
		w.closeAfter = true
		w.del("Transfer-Encoding")
	default:
		w.chunked = true
		setTE = "chunked"
		if te == "chunked" {
			w.del("Transfer-Encoding")
		}
	}
	if w.chunked {
		w.del("Content-Length")
	}
	if w.body != nil && !w.closeAfter && !w.duplex && !w.body.beforeResponse() {
		w.closeAfter = true // a large unread body: net/http closes too
	}
	if w.closeAfter && !hasToken(conn, "close") && w.status != http.StatusSwitchingProtocols {
		w.del("Connection")
		setConn = "close"
	}
	hasDate := w.dateField
	w.writeStatus(w.status)
	for _, f := range w.snap {
		if !f.gone {
			w.writeField(f.k, f.v)
		}
	}
	bw := w.bw
	if setCT != "" {
		_, _ = bw.WriteString("Content-Type: " + setCT + "\r\n")
	}
	if setConn != "" {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	if setTE != "" {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !hasDate {
		bw.field("Date", w.cn.s.date.Text())
	}
	if setCL != "" {
		bw.field("Content-Length", setCL)
	}
	_, err := bw.WriteString("\r\n")
	w.noteErr(err)
	if len(w.held) > 0 && !w.head {
		w.writeBody(w.held)
	}
	w.held = w.held[:0]
}

func (w *writer) writeStatus(code int) {
	bw := w.bw
	_, _ = bw.WriteString("HTTP/1.1 ")
	_ = bw.WriteByte(byte('0' + code/100))
	_ = bw.WriteByte(byte('0' + code/10%10))
	_ = bw.WriteByte(byte('0' + code%10))
	_ = bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		_, _ = bw.WriteString(text)
	} else {
		_, _ = bw.WriteString("status code ")
		_, _ = bw.WriteString(strconv.Itoa(code))
	}
	_, _ = bw.WriteString("\r\n")
}

// writeField writes one field as net/http does: a name that is not valid
// is dropped, values are trimmed and their line breaks made spaces.
func (w *writer) writeField(k string, vs []string) {
	if !httpguts.ValidHeaderFieldName(k) {
		return
	}
	bw := w.bw
	for _, v := range vs {
		v = textproto.TrimString(v)
		if httpwire.IndexLineBreak(v) < 0 {
			bw.field(k, v)
			continue
		}
		_, _ = bw.WriteString(k)
		_, _ = bw.WriteString(": ")
		for {
			i := httpwire.IndexLineBreak(v)
			if i < 0 {
				break
			}
			_, _ = bw.WriteString(v[:i])
			_ = bw.WriteByte(' ')
			v = v[i+1:]
		}
		_, _ = bw.WriteString(v)
		_, _ = bw.WriteString("\r\n")
	}
}

// hasToken reports whether the comma-separated list v holds tok.
func hasToken(v, tok string) bool {
	for t := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(textproto.TrimString(t), tok) {
			return true
		}
	}
	return false
}
