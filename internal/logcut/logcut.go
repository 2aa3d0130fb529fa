// Package logcut bounds the values a client sends (a method, a Host, a
// path, a header field's value) that a log line repeats. Each may be as
// long as the header block (64 KiB by default, up to 8 MiB), and every
// request that sends one would otherwise write a line that long: as much
// log as traffic. The access log (internal/gateway), the warnings and
// errors that name a request, and the host sidecar's lines cut them the
// same way, so one marker reads the same in every line.
package logcut

import (
	"strconv"
	"unicode/utf8"
)

// Bounds, in bytes, marker included. A host name is at most 253 bytes
// (and a port), a method a short token; a path is kept well past what an
// operator reads; any other value (a header field's) as a host.
const (
	MaxMethod = 64
	MaxHost   = 512
	MaxPath   = 2048
	MaxValue  = 512
)

// Method is m bounded by MaxMethod.
func Method(m string) string { return String(m, MaxMethod) }

// Host is h bounded by MaxHost.
func Host(h string) string { return String(h, MaxHost) }

// Path is p bounded by MaxPath.
func Path(p string) string { return String(p, MaxPath) }

// Value is v bounded by MaxValue.
func Value(v string) string { return String(v, MaxValue) }

// String returns s if it fits in n bytes, or else as much of its start
// as fits in n bytes with a marker naming s's length, cut before a
// character. Marker and all, the value stays within n bytes, so a cut is
// never longer than what was sent, even for a value just past the bound;
// that needs room for the marker, at most 46 bytes (a 20-digit length),
// which every bound here leaves: a smaller n gives the marker alone.
// A value that fits costs nothing.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const before, after = "...[truncated from ", " bytes]"
	var num [20]byte
	size := strconv.AppendInt(num[:0], int64(len(s)), 10)
	n -= len(before) + len(size) + len(after)
	// A byte no character begins with may be in the middle of one; an
	// invalid run of them is cut before, which only keeps less.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + before + string(size) + after
}
