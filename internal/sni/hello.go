package sni

import "fmt"

// Extension numbers (IANA TLS ExtensionType registry).
const (
	extServerName        = 0
	extSupportedGroups   = 10
	extALPN              = 16
	extSupportedVersions = 43
)

// cursor walks a byte slice; every accessor reports false instead of
// reading past the end.
type cursor []byte

func (c *cursor) u8() (int, bool) {
	if len(*c) < 1 {
		return 0, false
	}
	v := int((*c)[0])
	*c = (*c)[1:]
	return v, true
}

func (c *cursor) u16() (int, bool) {
	if len(*c) < 2 {
		return 0, false
	}
	v := int((*c)[0])<<8 | int((*c)[1])
	*c = (*c)[2:]
	return v, true
}

func (c *cursor) bytes(n int) (cursor, bool) {
	if n < 0 || len(*c) < n {
		return nil, false
	}
	v := (*c)[:n]
	*c = (*c)[n:]
	return v, true
}

// vec8 and vec16 read a vector prefixed by a 1- or 2-byte length.
func (c *cursor) vec8() (cursor, bool) {
	n, ok := c.u8()
	if !ok {
		return nil, false
	}
	return c.bytes(n)
}

func (c *cursor) vec16() (cursor, bool) {
	n, ok := c.u16()
	if !ok {
		return nil, false
	}
	return c.bytes(n)
}

func malformed(what string) error { return fmt.Errorf("%w: bad %s", ErrInvalid, what) }

// parseClientHello parses the body of a ClientHello (RFC 8446 §4.1.2,
// RFC 5246 §7.4.1.2).
func parseClientHello(b []byte) (*Hello, error) {
	c := cursor(b)
	h := &Hello{}
	v, ok := c.u16()
	if !ok {
		return nil, malformed("version")
	}
	h.Version = uint16(v)
	if _, ok := c.bytes(32); !ok {
		return nil, malformed("random")
	}
	if sid, ok := c.vec8(); !ok || len(sid) > 32 {
		return nil, malformed("session id")
	}
	if cs, ok := c.vec16(); !ok || len(cs) < 2 || len(cs)%2 != 0 {
		return nil, malformed("cipher suites")
	}
	if cm, ok := c.vec8(); !ok || len(cm) < 1 {
		return nil, malformed("compression methods")
	}
	if len(c) == 0 {
		return h, nil // no extensions: an old client
	}
	exts, ok := c.vec16()
	if !ok || len(c) != 0 {
		return nil, malformed("extensions")
	}
	return h, parseExtensions(h, exts)
}

func parseExtensions(h *Hello, c cursor) error {
	seen := map[int]bool{}
	for len(c) > 0 {
		typ, ok := c.u16()
		if !ok {
			return malformed("extension")
		}
		data, ok := c.vec16()
		if !ok {
			return malformed("extension")
		}
		if seen[typ] {
			return fmt.Errorf("%w: duplicate extension %d", ErrInvalid, typ)
		}
		seen[typ] = true
		var err error
		switch typ {
		case extServerName:
			h.ServerName, err = parseServerName(data)
		case extALPN:
			h.ALPN, err = parseALPN(data)
		case extSupportedGroups:
			h.SupportedGroups, err = parseU16List(data, "supported groups", (*cursor).vec16)
		case extSupportedVersions:
			h.SupportedVersions, err = parseU16List(data, "supported versions", (*cursor).vec8)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseServerName returns the host_name entry (RFC 6066 §3). A name must be
// printable ASCII without spaces; IDNA and case are the router's business.
func parseServerName(c cursor) (string, error) {
	list, ok := c.vec16()
	if !ok || len(c) != 0 || len(list) == 0 {
		return "", malformed("server name")
	}
	name := ""
	for len(list) > 0 {
		typ, ok := list.u8()
		if !ok {
			return "", malformed("server name")
		}
		v, ok := list.vec16()
		if !ok {
			return "", malformed("server name")
		}
		if typ != 0 {
			continue // unknown name types are skipped
		}
		if name != "" || len(v) == 0 || len(v) > 255 {
			return "", malformed("server name")
		}
		for _, b := range v {
			if b <= ' ' || b >= 0x7f {
				return "", malformed("server name")
			}
		}
		name = string(v)
	}
	return name, nil
}

// parseALPN returns the offered protocols (RFC 7301 §3.1).
func parseALPN(c cursor) ([]string, error) {
	list, ok := c.vec16()
	if !ok || len(c) != 0 || len(list) == 0 {
		return nil, malformed("alpn")
	}
	var out []string
	for len(list) > 0 {
		p, ok := list.vec8()
		if !ok || len(p) == 0 {
			return nil, malformed("alpn")
		}
		out = append(out, string(p))
	}
	return out, nil
}

// parseU16List reads a vector of uint16 whose length prefix vec reads.
func parseU16List(c cursor, what string, vec func(*cursor) (cursor, bool)) ([]uint16, error) {
	list, ok := vec(&c)
	if !ok || len(c) != 0 || len(list)%2 != 0 {
		return nil, malformed(what)
	}
	out := make([]uint16, 0, len(list)/2)
	for len(list) > 0 {
		v, _ := list.u16()
		out = append(out, uint16(v))
	}
	return out, nil
}
