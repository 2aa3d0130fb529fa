package lane

import (
	"io"
	"sync"
)

// Sizes of the response buffers: every request in flight holds an out
// of outSize; a write that does not fit borrows a joinSize buffer for the
// length of that one call.
const (
	outSize  = 4 << 10
	joinSize = 32 << 10
)

// out buffers a response on its way to the client, as a bufio.Writer of
// outSize would, with one difference: a write that does not fit goes out
// together with what is held, in one write to the connection, through a
// joinSize buffer borrowed from a pool for that call. A bufio.Writer
// sends the two apart, and each write costs the client's side a segment
// and a wake-up: a 16 KiB response took three writes where one does.
// Holding a bigger buffer per request instead would tie it up for the
// life of a long response (a stream can last hours).
type out struct {
	w     io.Writer
	buf   []byte // held bytes; cap outSize
	err   error  // the first write error, returned from then on
	joins *sync.Pool
}

func newOut(w io.Writer, joins *sync.Pool) *out {
	return &out{w: w, buf: make([]byte, 0, outSize), joins: joins}
}

// Reset drops what is held and any error, and writes to w from now on.
func (o *out) Reset(w io.Writer) {
	o.w, o.buf, o.err = w, o.buf[:0], nil
}

// Buffered is how many bytes are held.
func (o *out) Buffered() int { return len(o.buf) }

// Flush sends what is held.
func (o *out) Flush() error {
	if o.err != nil {
		return o.err
	}
	if len(o.buf) == 0 {
		return nil
	}
	_, o.err = o.w.Write(o.buf)
	o.buf = o.buf[:0]
	return o.err
}

// WriteString holds s, sending what is held whenever the buffer fills:
// strings are head fields, which need no joining.
func (o *out) WriteString(s string) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n := len(s)
	for len(s) > 0 {
		if len(o.buf) == cap(o.buf) && o.Flush() != nil {
			return 0, o.err
		}
		k := min(len(s), cap(o.buf)-len(o.buf))
		o.buf = append(o.buf, s[:k]...)
		s = s[k:]
	}
	return n, nil
}

// field holds the head field "k: v\r\n", in one append when it fits.
func (o *out) field(k, v string) {
	if o.err == nil && len(o.buf)+len(k)+len(v)+4 <= cap(o.buf) {
		b := append(o.buf, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		o.buf = append(b, "\r\n"...)
		return
	}
	_, _ = o.WriteString(k)
	_, _ = o.WriteString(": ")
	_, _ = o.WriteString(v)
	_, _ = o.WriteString("\r\n")
}

func (o *out) WriteByte(c byte) error {
	if o.err != nil {
		return o.err
	}
	if len(o.buf) == cap(o.buf) && o.Flush() != nil {
		return o.err
	}
	o.buf = append(o.buf, c)
	return nil
}

func (o *out) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	if len(o.buf)+len(p) <= cap(o.buf) {
		o.buf = append(o.buf, p...)
		return len(p), nil
	}
	return o.write(p)
}

// write sends what is held and p, which together overflow buf: in one
// write of up to joinSize, then whatever is left of p directly if it is at
// least a buffer's worth, else held.
func (o *out) write(p []byte) (int, error) {
	n := len(p)
	if len(o.buf) == 0 {
		_, o.err = o.w.Write(p) // at least a buffer's worth: straight through
		if o.err != nil {
			return 0, o.err
		}
		return n, nil
	}
	jb := o.joins.Get().(*[joinSize]byte)
	j := append(jb[:0], o.buf...)
	k := min(len(p), joinSize-len(j))
	j = append(j, p[:k]...)
	_, o.err = o.w.Write(j)
	o.joins.Put(jb)
	o.buf = o.buf[:0]
	if o.err != nil {
		return 0, o.err
	}
	if _, err := o.Write(p[k:]); err != nil { // past joinSize: the rest afresh
		return 0, err
	}
	return n, nil
}
