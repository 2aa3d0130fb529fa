//go:build linux

package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/gatehouse-dev/gatehouse/internal/gcfloor"
	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// floorBytes (floor-bytes) is the L7 work gatehouse does for the
// harness's request, done on the heads' bytes with no net/http types: a
// bound on what the request path BENCHMARKS.md's "What would close it"
// names (heads kept as ordered fields from the client through the layers
// to the host and back) could cost, still on a goroutine per connection.
// Per request, as gatehouse does it: the head split into fields, names
// checked as tokens and values for control bytes; the route found by Host
// in a route table; a request id made; the client's sliding window
// charged (internal/limit, the harness's budget); the host's head written
// as the request line, Host, the client's fields less the hop-by-hop and
// forwarding ones, and gatehouse's eight (X-Forwarded-For, -Host, -Proto,
// X-Request-Id, X-Gatehouse-App-Id, -Client-Ip, -Cluster, -Request-Id);
// the answer's head split and checked the same way, its hop-by-hop fields
// dropped, and written back with X-Gatehouse-Cluster, X-Request-Id and the
// five rate-limit fields. Left out, as in the other floors: bodies, chunked
// answers, timeouts, metrics and the access log, the host pool (one host
// connection per client connection), failover. A request it cannot carry,
// or for another Host, ends the connection.
func floorBytes(ctx context.Context, listen, backend string) error {
	live, err := floorTable(backend)
	if err != nil {
		return err
	}
	win, err := limit.NewWindow(limit.WindowOptions{})
	if err != nil {
		return err
	}
	defer gcfloor.Start(ctx, 64<<20).Stop()
	fb := &bytesFloor{live: live, win: win, quota: limit.Quota{Limit: budget, Window: time.Minute}}
	return servePairs(ctx, listen, backend, func(c, hc net.Conn) { fb.serve(sock.Wrap(c), hc) })
}

type bytesFloor struct {
	live  *route.Live
	win   *limit.Window
	quota limit.Quota
	ids   atomic.Uint64
}

// hfield is one field of a head, both parts within the read buffer.
type hfield struct{ k, v []byte }

// splitHead splits a head (ending in an empty line) into its first line
// and its fields, checking each as the lane does; ok is false for a head
// it would refuse.
func splitHead(head []byte, fs []hfield) (first []byte, _ []hfield, ok bool) {
	head = head[:len(head)-4] // the empty line
	i := bytes.Index(head, []byte("\r\n"))
	if i < 0 {
		return head, fs, true
	}
	first, rest := head[:i], head[i+2:]
	for len(rest) > 0 {
		line := rest
		if j := bytes.Index(rest, []byte("\r\n")); j >= 0 {
			line, rest = rest[:j], rest[j+2:]
		} else {
			rest = nil
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			return nil, fs, false
		}
		k, v := line[:c], line[c+1:]
		for _, b := range k {
			if !httpguts.IsTokenRune(rune(b)) {
				return nil, fs, false
			}
		}
		if v = httpwire.TrimOWS(v); !httpwire.ValidValue(v) {
			return nil, fs, false
		}
		fs = append(fs, hfield{k, v})
	}
	return first, fs, true
}

// dropped are the request fields gatehouse does not pass on as the
// client sent them: hop-by-hop ones, and those it sets itself.
var dropped = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded",
	"X-Request-Id", "X-Gatehouse-App-Id", "X-Gatehouse-Client-Ip", "X-Gatehouse-Cluster", "X-Gatehouse-Request-Id",
}

// droppedAnswer are the answer's hop-by-hop fields.
var droppedAnswer = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Upgrade"}

func isDropped(k []byte, list []string) bool {
	for _, d := range list {
		if httpwire.EqualFold(k, d) {
			return true
		}
	}
	return false
}

func appendField[K, V ~string | ~[]byte](b []byte, k K, v V) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, v...)
	return append(b, "\r\n"...)
}

func (fb *bytesFloor) serve(c, hc net.Conn) {
	ip := netip.Addr{}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		ip = ap.Addr()
	}
	ipText := []byte(ip.String())
	in := make([]byte, 0, 8<<10)
	out := make([]byte, 0, floorMax)
	up := make([]byte, 0, 4<<10)
	down := make([]byte, 0, floorMax+1<<10)
	fs := make([]hfield, 0, 32)
	var scratch [64]byte
	for {
		var n int
		if in, n = readUntil(c, in, requestEnd); n < 0 {
			return
		}
		line, fields, ok := splitHead(in[:n], fs[:0])
		if !ok {
			return
		}
		var host []byte
		for _, f := range fields {
			if httpwire.EqualFold(f.k, "Host") {
				host = f.v
			}
		}
		m := fb.live.Load().Lookup(unsafe.String(unsafe.SliceData(host), len(host)))
		if m.Kind != route.KindApp || m.App == nil {
			return
		}
		app := m.App.ID
		id := strconv.AppendUint(append(scratch[:0], "bench-"...), fb.ids.Add(1), 36)
		res, _ := fb.win.Charge(limit.KeyFor(app, ip), 1, fb.quota)

		up = append(append(up[:0], line...), "\r\nHost: "...)
		up = append(append(up, host...), "\r\n"...)
		for _, f := range fields {
			if !isDropped(f.k, dropped) {
				up = appendField(up, f.k, f.v)
			}
		}
		up = appendField(up, "X-Forwarded-For", ipText)
		up = appendField(up, "X-Forwarded-Host", host)
		up = appendField(up, "X-Forwarded-Proto", "http")
		up = appendField(up, "X-Request-Id", id)
		up = appendField(up, "X-Gatehouse-App-Id", app)
		up = appendField(up, "X-Gatehouse-Client-Ip", ipText)
		up = appendField(up, "X-Gatehouse-Cluster", "bench")
		up = appendField(up, "X-Gatehouse-Request-Id", id)
		up = append(up, "\r\n"...)
		if _, err := hc.Write(up); err != nil {
			return
		}
		in = in[:copy(in, in[n:])]

		var a int
		if out, a = readUntil(hc, out, answerEnd); a < 0 {
			return
		}
		h := headEnd(out)
		status, afs, ok := splitHead(out[:h], fs[:0])
		if !ok {
			return
		}
		down = append(append(down[:0], status...), "\r\n"...)
		for _, f := range afs {
			if !isDropped(f.k, droppedAnswer) {
				down = appendField(down, f.k, f.v)
			}
		}
		down = appendField(down, "X-Gatehouse-Cluster", "bench")
		down = appendField(down, "X-Request-Id", id)
		var num [3][20]byte
		limitS := strconv.AppendInt(num[0][:0], int64(res.Limit), 10)
		remaining := strconv.AppendInt(num[1][:0], int64(res.Remaining), 10)
		reset := strconv.AppendInt(num[2][:0], limit.Seconds(res.Reset), 10)
		down = appendField(down, "X-Ratelimit-Limit", limitS)
		down = appendField(down, "X-Ratelimit-Remaining", remaining)
		down = appendField(down, "X-Ratelimit-Reset", reset)
		down = append(append(append(down, `Ratelimit-Policy: "app";q=`...), limitS...), ";w="...)
		down = append(strconv.AppendInt(down, limit.Seconds(fb.quota.Window), 10), "\r\n"...)
		down = append(append(append(down, `Ratelimit: "app";r=`...), remaining...), ";t="...)
		down = append(append(down, reset...), "\r\n\r\n"...)
		down = append(down, out[h:a]...)
		if _, err := c.Write(down); err != nil {
			return
		}
		out = out[:copy(out, out[a:])]
	}
}
