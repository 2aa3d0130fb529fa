package h2

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// want is what a decoder must read for fs: the valid fields, with
// lower-case names.
func want(fs []field) []hpack.HeaderField {
	var out []hpack.HeaderField
	for _, f := range fs {
		if !f.own && (!httpguts.ValidHeaderFieldName(f.k) || !httpguts.ValidHeaderFieldValue(f.v)) {
			continue
		}
		out = append(out, hpack.HeaderField{Name: strings.ToLower(f.k), Value: f.v})
	}
	return out
}

// encodeAll encodes blocks of fields one after another with one encoder,
// lowering the table to limits[i] (when there is one) before block i, and
// decodes each with one decoder that allows what the client's setting
// would. It fails t at the first block that decodes to anything but its
// fields, and returns each block's size.
func encodeAll(t testing.TB, blocks [][]field, limits map[int]uint32) []int {
	t.Helper()
	e := &encoder{max: maxTable}
	limit := uint32(maxTable)
	d := hpack.NewDecoder(maxTable, nil)
	var sizes []int
	for i, fs := range blocks {
		if l, ok := limits[i]; ok && l < limit {
			limit = l
			d.SetAllowedMaxDynamicTableSize(l)
		}
		b := e.shrink(nil, limit)
		for _, f := range fs {
			b = e.appendField(b, f)
		}
		got, err := d.DecodeFull(b)
		if err != nil {
			t.Fatalf("block %d (% x): %v", i, b, err)
		}
		for j := range got {
			got[j].Sensitive = false
		}
		// Formatted only to say how they differ: fmt.Sprint of every
		// block took some 40% of this test's time under -race.
		if w := want(fs); !slices.Equal(got, w) {
			t.Fatalf("block %d decodes to\n%v\nwant\n%v", i, got, w)
		}
		if e.size > e.max || e.count > maxEntries {
			t.Fatalf("block %d: table of %d bytes, %d entries, over its %d", i, e.size, e.count, e.max)
		}
		sizes = append(sizes, len(b))
	}
	return sizes
}

// TestEncoderRepeats: a response that repeats the one before it is a few
// bytes, its fields indexed, but never the credentials, which go as
// "never indexed" literals every time.
func TestEncoderRepeats(t *testing.T) {
	t.Parallel()
	resp := func(id string) []field {
		return []field{
			{k: "Content-Type", v: "text/plain; charset=utf-8"},
			{k: "X-Gatehouse-Cluster", v: "local"},
			{k: "Ratelimit-Policy", v: `"app";q=1000000;w=60`},
			{k: "X-Request-Id", v: id},
			{k: "Set-Cookie", v: "s=1"},
			{k: "content-length", v: "1024", own: true},
		}
	}
	sizes := encodeAll(t, [][]field{resp("a1b2c3d4e5f6a7b8"), resp("f0e1d2c3b4a59687"), resp("0123456789abcdef")}, nil)
	// Second and third: four one-byte indices, the request id's literal
	// value (12 bytes Huffman-coded) under its indexed name, the cookie.
	if sizes[1] > 25 || sizes[2] != sizes[1] || sizes[0] < 3*sizes[1] {
		t.Fatalf("block sizes %v: the repeated fields were not indexed", sizes)
	}

	e := &encoder{max: maxTable}
	for range 2 {
		b := e.appendField(nil, field{k: "Set-Cookie", v: "s=1"})
		if b[0]&0xf0 != 0x10 {
			t.Fatalf("Set-Cookie encoded % x: not a never-indexed literal", b)
		}
	}

	// A field whose value changes on every response enters the table
	// twice (the name's first, then a change that may be the last) and
	// then no more; one that changes now and then goes on being indexed.
	e = &encoder{max: maxTable}
	for i := range 50 {
		e.appendField(nil, field{k: "X-Trace", v: fmt.Sprint("trace-", i)})
		e.appendField(nil, field{k: "Date", v: fmt.Sprint("second ", i/10)})
	}
	if e.inserted != 2+5 {
		t.Fatalf("%d entries inserted, want 2 for X-Trace and 5 for Date", e.inserted)
	}
}

// TestEncoderAgainstDecoder runs random responses through the encoder and
// x/net's decoder: names and values from small sets (so they repeat),
// some large enough to evict, some invalid, many names (past maxNames and
// maxHeld), and the client's table limit lowered now and then.
func TestEncoderAgainstDecoder(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel() // each seed its own encoder and decoder
			rng := rand.New(rand.NewPCG(seed, 7))
			var blocks [][]field
			limits := map[int]uint32{}
			for i := range 300 {
				var fs []field
				for range rng.IntN(12) {
					fs = append(fs, randomField(rng))
				}
				blocks = append(blocks, fs)
				if rng.IntN(60) == 0 {
					limits[i] = uint32(rng.IntN(maxTable + 1))
				}
			}
			encodeAll(t, blocks, limits)
		})
	}
}

func randomField(rng *rand.Rand) field {
	names := []string{"Content-Type", "Date", "X-Request-Id", "Ratelimit", "Set-Cookie", "Authorization",
		"Cache-Control", "X-Custom", "Vary", "Etag", "Bad Name", ""}
	var k string
	switch rng.IntN(4) {
	case 0:
		k = fmt.Sprintf("X-Name-%d", rng.IntN(400)) // past maxNames
	default:
		k = names[rng.IntN(len(names))]
	}
	var v string
	switch rng.IntN(6) {
	case 0:
		v = strings.Repeat("v", rng.IntN(2*maxTable)) // some over a quarter of the table, one over all of it
	case 1:
		v = "bad\x00value"
	case 2:
		v = fmt.Sprintf("%x", rng.Uint64()) // unique
	default:
		v = fmt.Sprintf("value-%d", rng.IntN(8))
	}
	if rng.IntN(8) == 0 {
		return field{k: "content-length", v: fmt.Sprint(rng.IntN(3)), own: true}
	}
	return field{k: k, v: v}
}

// FuzzEncoder: any sequence of fields (names and values as a host may send
// them) decodes, block by block, to exactly its valid fields.
func FuzzEncoder(f *testing.F) {
	f.Add("Content-Type\x01text/plain\x02X-Request-Id\x01abc\x03Content-Type\x01text/plain\x02X-Request-Id\x01abd", uint16(4096))
	f.Add("Set-Cookie\x01a=1\x03Set-Cookie\x01a=1\x03Bad Name\x01x", uint16(0))
	f.Add(strings.Repeat("A\x01"+strings.Repeat("x", 1000)+"\x03", 10), uint16(2000))
	f.Fuzz(func(t *testing.T, s string, limit uint16) {
		var blocks [][]field
		for _, blk := range strings.Split(s, "\x03") {
			var fs []field
			for _, kv := range strings.Split(blk, "\x02") {
				k, v, _ := strings.Cut(kv, "\x01")
				fs = append(fs, field{k: k, v: v})
			}
			blocks = append(blocks, fs)
		}
		encodeAll(t, blocks, map[int]uint32{len(blocks) / 2: uint32(limit)})
	})
}

// TestEncoderNamesEvictedEntry: an entry whose insertion evicts the entry
// its name would point to spells the name out (RFC 7541 §4.4 cautions
// decoders about such references; x/net's copes, others may not).
func TestEncoderNamesEvictedEntry(t *testing.T) {
	t.Parallel()
	e := &encoder{max: maxTable}
	v := func(c string) string { return strings.Repeat(c, maxTable/4-32-3) } // a quarter of the table with a 3-byte name
	for _, k := range []string{"X-A", "X-B", "X-C", "X-D"} {
		if b := e.appendField(nil, field{k: k, v: v("a")}); b[0] != 0x40 {
			t.Fatalf("%s encoded % x: want a literal with a new name, indexed", k, b[:1])
		}
	}
	if e.size != maxTable {
		t.Fatalf("table of %d bytes, want it full (%d)", e.size, maxTable)
	}
	// X-A's entry, the oldest, is evicted by the new one's insertion.
	if b := e.appendField(nil, field{k: "X-A", v: v("b")}); b[0] != 0x40 {
		t.Fatalf("X-A again encoded % x: want its name spelled out", b[:2])
	}
	// X-A's new entry is the newest: the next one names it (index 62),
	// not indexed itself, its value having changed twice in a row.
	if b := e.appendField(nil, field{k: "X-A", v: strings.Repeat("c", 10)}); b[0] != 0x0f || b[1] != 62-15 {
		t.Fatalf("X-A a third time encoded % x: want a literal without indexing, named by entry 62", b[:2])
	}
}

// TestResponseFieldsInterleaved: many streams of one connection answered
// at once, by handlers that send their heads at different moments (at
// once with a flush, with an interim 103 first, at the end with trailers),
// each head with fields that repeat across streams and fields of its own:
// net/http's client, one HPACK decoder for the connection, reads every
// head as its handler set it. An encoding out of the wire's order fails
// the connection (COMPRESSION_ERROR) or shows another stream's fields.
func TestResponseFieldsInterleaved(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.URL.Query().Get("n")
		hdr := w.Header()
		hdr.Set("Content-Type", "text/plain")
		hdr.Set("X-Shared", "same for all")
		hdr.Set("X-Stream", n)
		hdr.Set("X-Group", "g"+n[len(n)-1:])
		hdr.Add("Vary", "Origin")
		hdr.Add("Vary", "Accept-Encoding")
		switch n[len(n)-1] % 4 {
		case 0:
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		case 1:
			hdr.Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			hdr.Del("Link")
		case 2:
			hdr.Set("Trailer", "X-Trailer")
		}
		_, _ = io.WriteString(w, "body "+n)
		if n[len(n)-1]%4 == 2 {
			hdr.Set("X-Trailer", "t"+n)
		}
	})
	_, addr := serve(t, Options{Handler: h})
	c := client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := fmt.Sprint(i)
			res, err := c.Get("http://" + addr + "/?n=" + n)
			if err != nil {
				errs <- err
				return
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			h := res.Header
			if err != nil || string(body) != "body "+n || h.Get("X-Stream") != n || h.Get("X-Group") != "g"+n[len(n)-1:] ||
				h.Get("X-Shared") != "same for all" || h.Get("Content-Type") != "text/plain" ||
				strings.Join(h.Values("Vary"), ",") != "Origin,Accept-Encoding" || h.Get("Link") != "" ||
				(n[len(n)-1]%4 == 2 && res.Trailer.Get("X-Trailer") != "t"+n) {
				errs <- fmt.Errorf("request %s: %q %v, header %v, trailer %v", n, body, err, h, res.Trailer)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTableLoweredMidConnection: a client that lowers
// SETTINGS_HEADER_TABLE_SIZE after some responses gets, at the start of
// the next header block, the update that lowers our table to it, and
// every block after decodes with its decoder held to the new size.
func TestTableLoweredMidConnection(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Same", "the same value on every response")
		_, _ = io.WriteString(w, "ok")
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	dec := rc.fr.ReadMetaHeaders
	var raw []byte
	get := func(id uint32) (fields []string) {
		rc.headers(id, true, reqFields("GET", "/")...)
		rc.fr.ReadMetaHeaders = nil // the block's bytes, decoded below with the connection's decoder
		rc.until("the response", func(f http2.Frame) bool {
			hf, ok := f.(*http2.HeadersFrame)
			if !ok || hf.StreamID != id {
				return false
			}
			raw = append(raw[:0], hf.HeaderBlockFragment()...)
			got, err := dec.DecodeFull(raw)
			if err != nil {
				t.Fatalf("stream %d's block % x: %v", id, raw, err)
			}
			for _, f := range got {
				fields = append(fields, f.Name+": "+f.Value)
			}
			return true
		})
		return fields
	}
	for id := uint32(1); id <= 5; id += 2 {
		if f := get(id); !slices.Contains(f, "x-same: the same value on every response") {
			t.Fatalf("stream %d: %v", id, f)
		}
	}
	if raw[0]&0xe0 == 0x20 {
		t.Fatalf("block % x starts with a table size update, none asked", raw)
	}
	if err := rc.fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 64}); err != nil {
		t.Fatal(err)
	}
	rc.until("the SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})
	dec.SetAllowedMaxDynamicTableSize(64)
	for id := uint32(7); id <= 11; id += 2 {
		if f := get(id); !slices.Contains(f, "x-same: the same value on every response") {
			t.Fatalf("stream %d: %v", id, f)
		}
		if first := id == 7; first != (raw[0] == 0x20|31 && raw[1] == 64-31) {
			t.Fatalf("stream %d's block starts % x: want an update to 64 on the first after the setting only", id, raw[:2])
		}
	}
}

// TestConnectionFieldsLeftOut: fields HTTP/2 has no place for (RFC 9113
// §8.2.2; TE is a request's alone), and trailer-prefixed fields (sent after the body), are left
// out of an interim head and a final one alike; a client such as nghttp2
// fails a response that carries a connection-specific field.
func TestConnectionFieldsLeftOut(t *testing.T) {
	t.Parallel()
	left := []string{"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Te"}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		for _, k := range left {
			hdr.Set(k, "x")
		}
		hdr.Set(http.TrailerPrefix+"X-Late", "t")
		hdr.Set("X-Kept", "k")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "ok")
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	dec := rc.fr.ReadMetaHeaders
	rc.fr.ReadMetaHeaders = nil // the blocks' bytes, decoded below
	rc.headers(1, true, reqFields("GET", "/")...)
	var heads [][]hpack.HeaderField
	rc.until("the final head", func(f http2.Frame) bool {
		hf, ok := f.(*http2.HeadersFrame)
		if !ok || hf.StreamID != 1 {
			return false
		}
		got, err := dec.DecodeFull(hf.HeaderBlockFragment())
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, got)
		return len(heads) == 2
	})
	for i, head := range heads {
		var kept bool
		for _, f := range head {
			for _, k := range append(left, "X-Late", "Trailer:X-Late") {
				if strings.EqualFold(f.Name, k) {
					t.Errorf("head %d carries %s: %v", i, f.Name, head)
				}
			}
			kept = kept || f.Name == "x-kept" && f.Value == "k"
		}
		if !kept {
			t.Errorf("head %d lost x-kept: %v", i, head)
		}
	}
	if heads[0][0].Value != "103" || heads[1][0].Value != "200" {
		t.Fatalf("statuses %q, %q: want 103 then 200", heads[0][0].Value, heads[1][0].Value)
	}
}
