package h2

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// readFrames reads b's frames as the server does (ours: blockReader) or as
// x/net's Framer does with ReadMetaHeaders set, and describes each frame
// and error, up to the first error that is not a stream's.
func readFrames(b []byte, ours bool, maxList uint32) []string {
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	fr.MaxHeaderListSize = maxList
	var br blockReader
	if ours {
		br.init(&sync.Pool{})
	} else {
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	}
	var out []string
	for range 64 {
		f, err := fr.ReadFrame()
		if hf, ok := f.(*http2.HeadersFrame); ok && err == nil && ours {
			f, err = br.read(fr, hf)
		}
		var se http2.StreamError
		var ce http2.ConnectionError
		switch {
		case errors.As(err, &se):
			out = append(out, fmt.Sprintf("stream error %d %v", se.StreamID, se.Code))
		case errors.As(err, &ce):
			return append(out, fmt.Sprintf("connection error %v", http2.ErrCode(ce)))
		case err != nil:
			return append(out, "read error") // the same bytes fail the same read either way
		case f == nil:
			return append(out, "no frame")
		default:
			mh, ok := f.(*http2.MetaHeadersFrame)
			if !ok {
				out = append(out, fmt.Sprintf("%v %d", f.Header().Type, f.Header().StreamID))
				break
			}
			d := fmt.Sprintf("headers %d end=%v truncated=%v priority=%v", mh.StreamID, mh.StreamEnded(), mh.Truncated, mh.HasPriority())
			for _, hf := range mh.Fields {
				d += fmt.Sprintf(" %q=%q", hf.Name, hf.Value)
			}
			out = append(out, d)
		}
		br.done()
	}
	return out
}

// blocks writes header blocks as frames: each block's fields encoded with
// one encoder (so later blocks index earlier ones), split into a HEADERS
// frame and CONTINUATIONs of at most split bytes each.
func blocks(split int, list ...[]string) []byte {
	var out, hb bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&hb)
	for i, fields := range list {
		hb.Reset()
		for j := 0; j+1 < len(fields); j += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[j], Value: fields[j+1]})
		}
		blk, id := hb.Bytes(), uint32(2*i+1)
		first := blk[:min(split, len(blk))]
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(first) == len(blk)})
		for rest := blk[len(first):]; len(rest) > 0; {
			n := min(split, len(rest))
			_ = fr.WriteContinuation(id, n == len(rest), rest[:n])
			rest = rest[n:]
		}
	}
	return out.Bytes()
}

var getFields = []string{":method", "GET", ":scheme", "https", ":authority", "a.example", ":path", "/"}

func with(fields ...string) []string { return append(slices.Clone(getFields), fields...) }

// TestBlockReaderAsFramer: the server's own header block decoding gives
// what x/net's Framer gives for the same frames (the fields, a truncated
// list, the stream and connection errors and their codes), block after
// block on one connection, where the field slice is reused.
func TestBlockReaderAsFramer(t *testing.T) {
	t.Parallel()
	long := string(bytes.Repeat([]byte("v"), 200)) // under the list's size, the longest string the decoder takes
	var wide []string                              // a 1.1 KB block: '~' is longer Huffman-coded, so sent as is
	for i := range 11 {
		wide = append(wide, fmt.Sprintf("x-%d", i), string(bytes.Repeat([]byte("~"), 100)))
	}
	cases := []struct {
		name    string
		b       []byte
		maxList uint32
		want    string // a line the description must hold: the case is what it says
	}{
		{"one block", blocks(1<<14, getFields), 4096, `":authority"="a.example"`},
		{"blocks reusing fields", blocks(1<<14, with("x-a", "1", "x-b", "2", "cookie", "c"), getFields, with("x-c", "3")), 4096, `"x-c"="3"`},
		{"continuations", blocks(5, with("x-a", "1", "user-agent", "test")), 4096, `"user-agent"="test"`},
		{"uppercase name", blocks(1<<14, with("X-Up", "1"), getFields), 4096, "stream error 1 PROTOCOL_ERROR"},
		{"bad value", blocks(1<<14, with("x-a", "1\r\n2"), getFields), 4096, "stream error 1 PROTOCOL_ERROR"},
		{"pseudo after regular", blocks(1<<14, []string{":method", "GET", "x-a", "1", ":path", "/"}, getFields), 4096, "stream error 1 PROTOCOL_ERROR"},
		{"duplicate pseudo", blocks(1<<14, with(":path", "/b")), 4096, "stream error 1 PROTOCOL_ERROR"},
		{"unknown pseudo", blocks(1<<14, []string{":method", "GET", ":foo", "x"}), 4096, "stream error 1 PROTOCOL_ERROR"},
		{"request and response pseudo", blocks(1<<14, []string{":method", "GET", ":status", "200"}), 4096, "stream error 1 PROTOCOL_ERROR"},
		{"list over budget", blocks(1<<14, with("x-long", long), getFields), 256, "truncated=true"},
		{"trailer field budget", blocks(1<<14, with("trailer", "a, b, c", "x-a", "1")), 256, `"trailer"="a, b, c"`},
		{"block over four times the budget", blocks(1<<14, with(wide...)), 256, "connection error PROTOCOL_ERROR"},
		{"string over the budget", blocks(1<<14, with("x-s", noise(1, 300)), getFields), 256, "connection error COMPRESSION_ERROR"},
		{"bad hpack", append(blocks(1<<14, getFields), 0, 0, 1, 1, 5, 0, 0, 0, 3, 0xff), 4096, "connection error COMPRESSION_ERROR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, want := readFrames(tc.b, true, tc.maxList), readFrames(tc.b, false, tc.maxList)
			if !slices.Equal(got, want) {
				t.Fatalf("blockReader:\n%s\nx/net's Framer:\n%s", join(got), join(want))
			}
			if !bytes.Contains([]byte(join(got)), []byte(tc.want)) {
				t.Fatalf("the case does not show %q:\n%s", tc.want, join(got))
			}
		})
	}
}

// TestBlockReaderKeepsTheConnection: where x/net's Framer ends the
// connection for a block over the list's budget or malformed (see
// blockReader.read), the server's block reader decodes the block whole,
// fields discarded, and reports the list truncated (431) or the stream
// malformed; the next block, which indexes fields the first added to the
// HPACK table, before and after the one that broke the budget, decodes
// as sent.
func TestBlockReaderKeepsTheConnection(t *testing.T) {
	t.Parallel()
	long := string(bytes.Repeat([]byte("v"), 200))
	next := with("x-a", "1", "x-b", "2")
	cases := []struct {
		name string
		b    []byte
		want string // the first block's outcome
	}{
		{"list over budget, continuations past it", blocks(64, with("x-a", "1", "x-long", long, "x-more", long, "x-b", "2"), next), "truncated=true"},
		{"two strings over the budget together, in continuations", blocks(50, with("x-a", "1", "x-s", noise(2, 200), "x-t", noise(3, 200), "x-b", "2"), next), "truncated=true"},
		{"malformed, then continuations", blocks(8, with("x-a", "1", "X-Up", "1", "x-b", "2"), next), "stream error 1 PROTOCOL_ERROR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, xnet := readFrames(tc.b, true, 256), readFrames(tc.b, false, 256)
			if len(got) != 3 || !strings.Contains(got[0], tc.want) || got[2] != "read error" { // the end of the bytes
				t.Fatalf("first block: want %q:\n%s", tc.want, join(got))
			}
			if !strings.HasSuffix(got[1], `"x-a"="1" "x-b"="2"`) || !strings.HasPrefix(got[1], "headers 3 end=true truncated=false") {
				t.Fatalf("the next block:\n%s", got[1])
			}
			if len(xnet) == 0 || !strings.HasPrefix(xnet[len(xnet)-1], "connection error") {
				t.Fatalf("x/net's Framer keeps the connection: the case is not one where the two differ:\n%s", join(xnet))
			}
		})
	}
}

// agreeUntilConnError reports whether ours and x/net's descriptions of the
// same frames are the same up to the first connection error either ends
// with: past it they may differ, where ours keeps a connection x/net's
// Framer ends (a block over the list's budget or malformed) or ends one
// it keeps (a block over the hard bound, a flood of empty
// CONTINUATIONs or table size updates).
func agreeUntilConnError(ours, xnet []string) bool {
	n := min(len(ours), len(xnet))
	for _, l := range [][]string{ours, xnet} {
		if len(l) > 0 && strings.HasPrefix(l[len(l)-1], "connection error") {
			n = min(n, len(l)-1)
		}
	}
	if !slices.Equal(ours[:n], xnet[:n]) {
		return false
	}
	return n < len(ours) && n < len(xnet) || slices.Equal(ours, xnet)
}

func join(lines []string) string { return fmt.Sprint(lines) }

// FuzzBlockReader: on any bytes, the server's header block decoding and
// x/net's agree, up to a connection error (agreeUntilConnError).
func FuzzBlockReader(f *testing.F) {
	f.Add(blocks(1<<14, getFields, with("x-a", "1")))
	f.Add(blocks(7, with("cookie", "a=1", "trailer", "x-t, x-u")))
	f.Add(blocks(1<<14, with("X-Up", "1"), getFields))
	f.Add(blocks(64, with("x-long", string(bytes.Repeat([]byte("v"), 200)), "x-more", "1")))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := readFrames(b, true, 256), readFrames(b, false, 256)
		if !agreeUntilConnError(got, want) {
			t.Fatalf("blockReader:\n%s\nx/net's Framer:\n%s", join(got), join(want))
		}
	})
}
