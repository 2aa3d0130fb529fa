package sni

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Limits on what Parse reads.
const (
	// MaxHelloBytes caps the ClientHello handshake message (its 4-byte
	// header included) where crypto/tls does (its maxHandshake: 64 KiB of
	// body), as the gateway's own handshake reads what Peek passes on.
	// Most hellos are about 2 KiB, in one record; a client with several
	// post-quantum key shares, many extensions or PSKs sends more, in
	// records of 2^14 bytes.
	//
	// Cost per connection: while a hello arrives, Peek holds the bytes
	// read and no copy of them, in a buffer grown as they come (to at
	// most twice what arrived, or one record, 16 KiB, past it) up to
	// maxRawBytes, ~68 KiB; a hello of several records is then copied
	// once into a buffer of its size for the parse, dropped when Peek
	// returns. The Conn keeps the bytes read until it has replayed them.
	MaxHelloBytes = 64<<10 + 4
	// maxRawBytes caps every byte read, record headers included: a whole
	// hello plus room for the headers of one split into small records
	// (crypto/tls's largest takes 5).
	maxRawBytes = MaxHelloBytes + 4<<10
	// maxRecordLen is the largest TLSPlaintext fragment (RFC 8446 §5.1).
	maxRecordLen = 1 << 14

	// maxIgnored is crypto/tls's maxUselessRecords: the warning alerts
	// in a row it drops before a hello's records, then refuses.
	maxIgnored = 16

	recordTypeAlert     = 21
	recordTypeHandshake = 22
	typeClientHello     = 1
	alertLevelWarning   = 1
	alertCloseNotify    = 0
)

// DefaultTimeout bounds Peek when it is given no timeout.
const DefaultTimeout = 10 * time.Second

// Errors Parse and Peek return; each wraps ErrInvalid except timeouts and
// I/O errors, which are returned wrapped as they come.
var (
	ErrInvalid   = errors.New("sni: not a valid TLS ClientHello")
	ErrTooLarge  = fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxHelloBytes)
	ErrTruncated = fmt.Errorf("%w: truncated", ErrInvalid)
	// ErrPlainHTTP: the client began an HTTP/1 request, not a TLS
	// record (an http:// URL sent to the https port).
	ErrPlainHTTP = fmt.Errorf("%w: a plain HTTP request", ErrInvalid)
	// The faults RFC 8446 names an alert for, which a server answering
	// the client tells it (crypto/tls sends the same ones, but none for
	// a first record of another type): ErrUnexpected, a record of another type or a handshake message
	// other than a ClientHello, or an empty handshake record (§4, §5,
	// §5.1: unexpected_message); ErrRecordOverflow, a record longer than
	// 2^14 bytes (§5.1: record_overflow); ErrSSLv2, an SSL 2.0 hello (a
	// version no longer spoken: protocol_version).
	ErrUnexpected     = fmt.Errorf("%w: unexpected message", ErrInvalid)
	ErrRecordOverflow = fmt.Errorf("%w: record overflow", ErrInvalid)
	ErrSSLv2          = fmt.Errorf("%w: an SSL 2.0 hello", ErrInvalid)
	// ErrAlert: the client sent an alert (a record of 2 bytes), not a
	// hello: a fatal one, or close_notify (a warning one crypto/tls
	// drops, and Parse too, up to 16 in a row). After a fatal alert both
	// sides close at once (RFC 8446 §6.2): it is not answered.
	ErrAlert = fmt.Errorf("%w: an alert", ErrInvalid)
)

// Hello is what the gateway learns from a ClientHello. Slices are never
// shared with the raw bytes.
type Hello struct {
	// ServerName is the host_name of the server_name extension as sent
	// (not normalized); empty when the client sent none.
	ServerName string
	// ALPN lists the protocols offered, in the client's order.
	ALPN []string
	// SupportedGroups lists the named groups (tls.CurveID values) offered.
	SupportedGroups []uint16
	// SupportedVersions lists the supported_versions extension; empty for a
	// client that only speaks TLS 1.2 or older.
	SupportedVersions []uint16
	// Version is the legacy_version field of the hello.
	Version uint16
}

// Conn is a net.Conn that first replays the bytes Peek read, then reads
// from the underlying connection. Writes, Close and deadlines go straight to
// the underlying connection. A Conn is owned by whoever Peek returned it to;
// like any net.Conn, Read and Write may be called concurrently with each
// other but not with themselves.
type Conn struct {
	net.Conn
	peeked []byte
	off    int
}

// Read replays the peeked bytes, then reads from the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if c.off < len(c.peeked) {
		n := copy(p, c.peeked[c.off:])
		c.off += n
		if c.off == len(c.peeked) {
			c.peeked, c.off = nil, 0 // replayed: the read buffer goes, not held for the connection's life
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// holder is a connection that can keep writes for its next Read to send
// (internal/sock's Conn).
type holder interface {
	Hold(buf []byte) bool
	Unhold()
	Release() error
}

// Hold passes Hold on to the underlying connection, but only once the
// peeked bytes are replayed: until then a Read is answered from them, and
// would not send what was kept. It reports whether the writes are kept.
func (c *Conn) Hold(buf []byte) bool {
	h, ok := c.Conn.(holder)
	return ok && c.off == len(c.peeked) && h.Hold(buf)
}

// Pending reports whether a Read has something to return without
// waiting: peeked bytes not yet replayed, or what the underlying
// connection's Pending says (true when it cannot say).
func (c *Conn) Pending() bool {
	if c.off < len(c.peeked) {
		return true
	}
	p, ok := c.Conn.(interface{ Pending() bool })
	return !ok || p.Pending()
}

// Unhold and Release pass on to the underlying connection.
func (c *Conn) Unhold() {
	if h, ok := c.Conn.(holder); ok {
		h.Unhold()
	}
}

func (c *Conn) Release() error {
	if h, ok := c.Conn.(holder); ok {
		return h.Release()
	}
	return nil
}

// CloseWrite passes on to the underlying connection, when it can
// half-close: a server ending its side (internal/h2's linger) sends the
// FIN it means to, not nothing. Without one it does nothing.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Peeked returns the bytes not yet replayed by Read. The pipe writes them to
// the passthrough host, then copies the raw connection (which splices).
func (c *Conn) Peeked() []byte { return c.peeked[c.off:] }

// Raw returns the underlying connection, bypassing the replay. Use it only
// after the bytes of Peeked were delivered elsewhere.
func (c *Conn) Raw() net.Conn { return c.Conn }

// Peek reads the ClientHello from c within timeout (zero means
// DefaultTimeout) and returns it with a Conn that replays what was read.
// The read deadline is cleared on success. On error the returned Conn is
// nil; c is not closed: the caller owns it and should close it.
func Peek(c net.Conn, timeout time.Duration) (*Hello, *Conn, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, nil, fmt.Errorf("sni: %w", err)
	}
	h, raw, err := Parse(c)
	if err != nil {
		return nil, nil, err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, nil, fmt.Errorf("sni: %w", err)
	}
	return h, &Conn{Conn: c, peeked: raw}, nil
}

// Parse reads TLS handshake records from r until it holds one whole
// ClientHello, and returns it with every byte it read: the records that
// carry the hello and whatever the client sent with them in the same reads
// (a reader that is not a connection may give more). It never reads more
// than MaxHelloBytes of hello plus room for record headers.
func Parse(r io.Reader) (*Hello, []byte, error) {
	rr := recordReader{r: r}
	msg, err := rr.helloMessage()
	if err != nil {
		return nil, nil, err
	}
	h, err := parseClientHello(msg)
	if err != nil {
		return nil, nil, err
	}
	return h, rr.raw, nil
}

// recordReader reads the TLS records of the handshake stream. It keeps
// no copy of their payload while they arrive (a slow client's pending
// hello holds only raw): the message is put together once it is whole.
type recordReader struct {
	r       io.Reader
	raw     []byte  // every byte read
	pos     int     // how much of raw the records took: raw[:pos] is whole records
	payload int     // handshake bytes in those records
	ignored int     // warning alerts since the last handshake record
	head    [4]byte // the first 4 of them: the message's header
}

// helloMessage returns the ClientHello body (without its 4-byte header).
func (rr *recordReader) helloMessage() ([]byte, error) {
	if err := rr.fill(4); err != nil {
		return nil, err
	}
	if rr.head[0] != typeClientHello {
		return nil, fmt.Errorf("%w: handshake type %d", ErrUnexpected, rr.head[0])
	}
	n := int(rr.head[1])<<16 | int(rr.head[2])<<8 | int(rr.head[3])
	if n+4 > MaxHelloBytes {
		return nil, ErrTooLarge
	}
	if err := rr.fill(4 + n); err != nil {
		return nil, err
	}
	return rr.message(4 + n)[4:], nil
}

// fill reads records until they carry at least n bytes of handshake
// payload.
func (rr *recordReader) fill(n int) error {
	for rr.payload < n {
		if err := rr.record(); err != nil {
			return err
		}
	}
	return nil
}

// message returns the first n bytes of handshake payload, which the
// records read hold: in place when the first handshake record holds them
// all (a hello's usual one record), else gathered from the handshake
// records (not the alerts dropped between them) into a buffer of n bytes.
func (rr *recordReader) message(n int) []byte {
	r := rr.raw[:rr.pos]
	for r[0] != recordTypeHandshake {
		r = r[5+(int(r[3])<<8|int(r[4])):]
	}
	if first := int(r[3])<<8 | int(r[4]); first >= n {
		return r[5 : 5+n : 5+n]
	}
	msg := make([]byte, 0, n)
	for len(msg) < n {
		k := int(r[3])<<8 | int(r[4])
		if r[0] == recordTypeHandshake {
			msg = append(msg, r[5:5+min(k, n-len(msg))]...)
		}
		r = r[5+k:]
	}
	return msg
}

// record reads one TLS record and counts its payload.
func (rr *recordReader) record() error {
	hdr, err := rr.read(5)
	if err != nil {
		return err
	}
	first := rr.pos == 5
	n := int(hdr[3])<<8 | int(hdr[4])
	switch {
	case hdr[0] == recordTypeHandshake:
	case hdr[0] == recordTypeAlert && n > maxRecordLen:
		// §5.1's record_overflow is for every record type: a record
		// this long is no client's alert.
		return fmt.Errorf("%w: alert record length %d", ErrRecordOverflow, n)
	case hdr[0] == recordTypeAlert && n != 2:
		// §5.1: an alert record holds exactly one alert, 2 bytes; other
		// lengths crypto/tls answers unexpected_message.
		return fmt.Errorf("%w: alert record length %d", ErrUnexpected, n)
	case hdr[0] == recordTypeAlert:
		return rr.alert()
	case first && looksLikeHTTP(hdr):
		return ErrPlainHTTP
	case first && looksLikeSSLv2(hdr):
		return ErrSSLv2
	default:
		return fmt.Errorf("%w: record type %d", ErrUnexpected, hdr[0])
	}
	// crypto/tls reads the hello's records before it has a version, so
	// it takes any below 0x1000 (the hello's own field is what counts):
	// refusing more would refuse a hello the gateway's handshake reads.
	if hdr[1] >= 0x10 {
		return fmt.Errorf("%w: record version %#02x%02x", ErrInvalid, hdr[1], hdr[2])
	}
	if n == 0 {
		return fmt.Errorf("%w: empty handshake record", ErrUnexpected)
	}
	if n > maxRecordLen {
		return fmt.Errorf("%w: record length %d", ErrRecordOverflow, n)
	}
	body, err := rr.read(n)
	if err != nil {
		return err
	}
	if rr.payload < len(rr.head) {
		copy(rr.head[rr.payload:], body)
	}
	rr.payload += n
	rr.ignored = 0
	return nil
}

// alert reads an alert record's 2 bytes. crypto/tls's server, which has
// no version before the hello (so none is TLS 1.3's), drops a warning
// alert other than close_notify, before the hello or between its
// records, up to maxIgnored in a row: the record stays in raw, to be
// replayed, and the hello is read on.
func (rr *recordReader) alert() error {
	body, err := rr.read(2)
	if err != nil {
		return err
	}
	if body[0] != alertLevelWarning || body[1] == alertCloseNotify {
		return ErrAlert
	}
	if rr.ignored++; rr.ignored > maxIgnored {
		return fmt.Errorf("%w: more than %d alerts in a row", ErrUnexpected, maxIgnored)
	}
	return nil
}

// looksLikeHTTP reports whether the first five bytes of a stream are an
// HTTP/1 request's: a method's capitals, then its space or more of it
// ("GET /", "POST ", "OPTIO"); after the space, the target may begin with
// any visible byte ("GET h": the absolute form, RFC 9112 §3.2.2, which a
// client sends to what it takes for its proxy). No TLS record starts with
// a capital letter (record types are 20-24).
func looksLikeHTTP(b []byte) bool {
	for i, c := range b[:5] {
		target := i > 1 && b[i-1] == ' ' && '!' <= c && c <= '~'
		if !('A' <= c && c <= 'Z' || i > 0 && (c == ' ' || c == '/' || c == '*') || target) {
			return false
		}
	}
	return true
}

// looksLikeSSLv2 reports whether the first five bytes of a stream are
// an SSL 2.0 CLIENT-HELLO's (RFC 6101 appendix E.2), as old clients sent
// for compatibility: a 2-byte length with the high bit set, message type
// 1, then a version.
func looksLikeSSLv2(b []byte) bool {
	return b[0]&0x80 != 0 && b[2] == typeClientHello && (b[3] == 0 || b[3] == 3)
}

// firstRead is the buffer of the first read: a whole hello (a
// post-quantum key share makes it ~1.5 KiB) in one system call, where
// reading the record header apart was a second.
const firstRead = 4 << 10

// read returns the next n bytes of the stream, reading more when what
// was read so far does not hold them. A read takes whatever the client
// sent (up to the buffer's end), so it can go past the hello; all of it
// stays in raw, which is replayed.
func (rr *recordReader) read(n int) ([]byte, error) {
	need := rr.pos + n
	if need > maxRawBytes {
		return nil, ErrTooLarge
	}
	if need > len(rr.raw) {
		if need > cap(rr.raw) {
			grown := make([]byte, len(rr.raw), min(max(need, 2*cap(rr.raw), firstRead), maxRawBytes))
			copy(grown, rr.raw)
			rr.raw = grown
		}
		k, err := io.ReadAtLeast(rr.r, rr.raw[len(rr.raw):cap(rr.raw)], need-len(rr.raw))
		rr.raw = rr.raw[:len(rr.raw)+k]
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, ErrTruncated
			}
			return nil, fmt.Errorf("sni: read: %w", err)
		}
	}
	b := rr.raw[rr.pos:need]
	rr.pos = need
	return b, nil
}
