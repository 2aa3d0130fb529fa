package h2

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// blockReader decodes a connection's request header blocks (a HEADERS
// frame and its CONTINUATIONs) with the connection's HPACK decoder, as
// x/net's Framer does when its ReadMetaHeaders is set, with the same
// checks and errors (but for a block over the list's bound or malformed,
// where the Framer ends the connection: see read), and into memory that
// outlives the block: the Framer builds a MetaHeadersFrame, an emit
// closure with its captured state and a field slice grown from nothing
// for every block, ten of an HTTP/2 request's twenty allocations and ~750
// of its ~2,150 bytes (BenchmarkRequestPipe). The fields' slice is the
// server's, pooled, so an idle connection holds none. Used by the
// connection's reading goroutine only.
type blockReader struct {
	dec  *hpack.Decoder
	pool *sync.Pool           // *[]hpack.HeaderField, the server's
	box  *[]hpack.HeaderField // the slice mh.Fields grows from, while a block is read
	mh   http2.MetaHeadersFrame

	invalid    error
	sawRegular bool
	// What is left of the header list's budget and of the trailer
	// field's (whose fields count as the names it lists, as x/net counts
	// them), each MaxHeaderListSize at the block's start.
	listLeft, trailerLeft uint32
}

// keepFields is the most fields a slice may hold to go back to the pool:
// a block of more (a large request's) leaves its slice to the collector.
const keepFields = 64

func (hb *blockReader) init(pool *sync.Pool) {
	hb.pool = pool
	hb.dec = hpack.NewDecoder(4096, hb.emit)
}

// A header list over MaxHeaderListSize is answered on its stream (431,
// Truncated), not by ending the connection, and a malformed one is reset:
// either way the rest of the block is still decoded, its fields
// discarded, so that the connection's HPACK table stays the client's, and
// the other streams go on. x/net's Framer ends the connection instead for
// any CONTINUATION past the list's budget or after a malformed field:
// with the 64 KiB a gateway sets (max_header_bytes), a browser's 70 KB of
// cookies over several fields would take down every stream of its
// connection.
//
// What that costs is bounded. A discarded field costs its decoding only
// (emit off: nothing is kept), so the block's encoded size, its frames'
// headers included, is bounded, at blockFactor times the budget: past it
// the connection ends (the CONTINUATION flood, whose answer x/net's rule
// is), and reading a block costs no more than that many bytes' worth.
// One field name or value over the budget still ends the connection
// (COMPRESSION_ERROR), as x/net's Framer answers a string over its bound:
// the decoder buffers a field whole, however many frames it spans, and
// keeps that buffer's memory for the connection's life, so a longer bound
// would let each connection of a client hold more (a field's worth, about
// twice its length).
const blockFactor = 4

// frameHeaderLen is the size of an HTTP/2 frame's header (RFC 9113 §4.1).
const frameHeaderLen = 9

// read decodes the block hf opens, reading its CONTINUATIONs from fr.
// The frame returned (hb's own) is valid until done. Errors are a
// ConnectionError, a StreamError for a block that decoded but is
// malformed, or fr's; a list over fr.MaxHeaderListSize is Truncated.
func (hb *blockReader) read(fr *http2.Framer, hf *http2.HeadersFrame) (*http2.MetaHeadersFrame, error) {
	limit := fr.MaxHeaderListSize
	if limit == 0 {
		limit = 16 << 20 // the Framer's own default
	}
	hb.box, _ = hb.pool.Get().(*[]hpack.HeaderField)
	if hb.box == nil {
		hb.box = new([]hpack.HeaderField)
	}
	hb.mh = http2.MetaHeadersFrame{HeadersFrame: hf, Fields: *hb.box}
	hb.invalid, hb.sawRegular = nil, false
	hb.listLeft, hb.trailerLeft = limit, limit
	hb.dec.SetEmitEnabled(true)
	hb.dec.SetMaxStringLength(int(min(int64(limit), math.MaxInt32)))

	blockLeft := blockFactor * int64(limit)
	frag, ended := hf.HeaderBlockFragment(), hf.HeadersEnded()
	for {
		// A frame's header counts with its fragment: CONTINUATIONs that
		// carry nothing are on the wire all the same, and a block of
		// them would otherwise never meet the bound.
		if blockLeft -= frameHeaderLen + int64(len(frag)); blockLeft < 0 {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := hb.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		cf := f.(*http2.ContinuationFrame) // the Framer's frame order check sees to it
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := hb.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if hb.invalid != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: hb.invalid}
	}
	if err := checkPseudos(hb.mh.PseudoFields()); err != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return &hb.mh, nil
}

// done gives the block's fields back, their strings cleared so that no
// request's values (credentials among them) stay reachable from the pool.
func (hb *blockReader) done() {
	if hb.box == nil {
		return
	}
	if f := hb.mh.Fields; cap(f) <= keepFields {
		clear(f)
		*hb.box = f[:0]
		hb.pool.Put(hb.box)
	}
	hb.box, hb.mh = nil, http2.MetaHeadersFrame{}
}

// emit takes one decoded field (x/net's readMetaFrame's emit function).
func (hb *blockReader) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		hb.invalid = fieldError{hf.Name, "value"} // not the value: it may be a secret
	}
	if strings.HasPrefix(hf.Name, ":") {
		if hb.sawRegular {
			hb.invalid = errPseudoAfterRegular
		}
	} else {
		hb.sawRegular = true
		if !validWireName(hf.Name) {
			hb.invalid = fieldError{hf.Name, "name"}
		}
	}
	if hb.invalid != nil {
		hb.dec.SetEmitEnabled(false)
		return
	}
	left, size := &hb.listLeft, hf.Size()
	if hf.Name == "trailer" {
		n := uint32(strings.Count(hf.Value, ",") + 1)
		left, size = &hb.trailerLeft, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *left {
		hb.dec.SetEmitEnabled(false)
		hb.mh.Truncated = true
		hb.listLeft, hb.trailerLeft = 0, 0
		return
	}
	*left -= size
	hb.mh.Fields = append(hb.mh.Fields, hf)
}

var errPseudoAfterRegular = errors.New("h2: pseudo-header field after a regular one")

// fieldError is a field whose name or value is not valid on the wire.
type fieldError struct{ name, what string }

func (e fieldError) Error() string {
	return fmt.Sprintf("h2: invalid header field %s for %q", e.what, e.name)
}

// validWireName reports a field name HTTP/2 allows: a token, lower case
// (RFC 9113 §8.2.1).
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// checkPseudos reports a pseudo-header field a request or response may
// not carry, one that appears twice, or a mix of the two kinds (x/net's
// MetaHeadersFrame.checkPseudos).
func checkPseudos(pf []hpack.HeaderField) error {
	var isRequest, isResponse bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			isRequest = true
		case ":status":
			isResponse = true
		default:
			return fmt.Errorf("h2: invalid pseudo-header %q", hf.Name)
		}
		for _, prev := range pf[:i] {
			if hf.Name == prev.Name {
				return fmt.Errorf("h2: duplicate pseudo-header %q", hf.Name)
			}
		}
	}
	if isRequest && isResponse {
		return errors.New("h2: mix of request and response pseudo-headers")
	}
	return nil
}
