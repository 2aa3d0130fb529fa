package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// Conditional requests (RFC 9110 §13). Every item the control API answers
// with (an app, a domain mapping, a zone, a record set, a host key)
// carries an ETag, and a PUT, DELETE or verify of one may carry If-Match
// or If-None-Match. A platform with two writers (two control-plane
// replicas; an operator with curl beside the platform) then loses no
// write: one made on an item as it was read answers 412 once the item has
// changed, and writes nothing. The check and the write are one store
// operation (the store's compare-and-set on the item's revision), so two
// writers that read the same tag cannot both succeed.
//
// The tag is a digest of the item's stored form rather than its store
// revision, so that every gateway on the store gives an item the same
// tag, and a PUT that writes what is already there keeps it.
//
// A request without either field is answered as before: the conditions
// are the caller's to ask for.

// precond is a request's If-Match and If-None-Match: nil when the field
// is absent; a list holding "*" for any item.
type precond struct {
	match, noneMatch []string
	read             bool // a GET or HEAD: nothing is written either way
}

// preconditions reads r's If-Match and If-None-Match. A field that does
// not parse is refused (400) rather than ignored: ignoring it would make
// a conditional write unconditional.
func preconditions(r *http.Request) (precond, error) {
	var p precond
	var err error
	if p.match, err = entityTags(r.Header, "If-Match"); err != nil {
		return precond{}, err
	}
	if p.noneMatch, err = entityTags(r.Header, "If-None-Match"); err != nil {
		return precond{}, err
	}
	p.read = r.Method == http.MethodGet || r.Method == http.MethodHead
	return p, nil
}

// entityTags parses every line of field as "*" or a comma-separated list
// of entity tags (RFC 9110 §8.8.3), keeping each tag as written, quotes
// and W/ included. Nil: the field is absent.
func entityTags(h http.Header, field string) ([]string, error) {
	lines := h.Values(field)
	if len(lines) == 0 {
		return nil, nil
	}
	tags := []string{}
	for _, line := range lines {
		s := strings.TrimLeft(strings.TrimSpace(line), ", \t") // a list may start with empty elements
		if s == "*" {
			tags = append(tags, "*")
			continue
		}
		for s != "" {
			tag, rest, err := entityTag(s)
			if err != nil {
				return nil, badInput("%s: %v; send * or a list of ETags such as %s", field, err, `"0123abcd"`)
			}
			tags = append(tags, tag)
			s = strings.TrimLeft(rest, " \t")
			if s == "" {
				break
			}
			if s[0] != ',' {
				return nil, badInput("%s: %s is followed by %q; ETags are quoted strings separated by commas", field, tag, s)
			}
			s = strings.TrimLeft(s[1:], " \t,")
		}
	}
	if len(tags) == 0 {
		return nil, badInput("%s: empty; send * or a list of ETags", field)
	}
	return tags, nil
}

// entityTag reads one entity tag from the start of s.
func entityTag(s string) (tag, rest string, err error) {
	i := 0
	if strings.HasPrefix(s, "W/") {
		i = 2
	}
	if i >= len(s) || s[i] != '"' {
		return "", "", errors.New("an ETag is a quoted string")
	}
	for j := i + 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '"':
			return s[:j+1], s[j+1:], nil
		case c == 0x21 || c >= 0x23 && c != 0x7f: // etagc
		default:
			return "", "", fmt.Errorf("byte %#02x cannot be in an ETag", c)
		}
	}
	return "", "", errors.New("an ETag's closing quote is missing")
}

// none reports whether the request set no condition.
func (p precond) none() bool { return p.match == nil && p.noneMatch == nil }

// holds reports whether p holds for an item whose tag is cur ("" when
// there is no item). If-Match compares strongly, so a weak tag never
// matches; If-None-Match weakly (RFC 9110 §13.1.1-2). The tags given are
// all gatehouse's own strong ones, or no item's.
func (p precond) holds(cur string) bool {
	if p.match != nil && !anyTag(p.match, cur, false) {
		return false
	}
	if p.noneMatch != nil && anyTag(p.noneMatch, cur, true) {
		return false
	}
	return true
}

// anyTag reports whether one of tags matches cur.
func anyTag(tags []string, cur string, weak bool) bool {
	if cur == "" {
		return false
	}
	for _, t := range tags {
		switch {
		case t == "*":
			return true
		case weak && strings.TrimPrefix(t, "W/") == strings.TrimPrefix(cur, "W/"):
			return true
		case !weak && t == cur && !strings.HasPrefix(t, "W/"):
			return true
		}
	}
	return false
}

// check answers 412 unless p holds for cur (nil: no item), what naming
// the item (`app "shop"`).
func check[T any](p precond, cur *T, what string) error {
	tag := ""
	if cur != nil {
		tag = etag(cur)
	}
	return p.checkTag(tag, what)
}

// checkTag is check for an item whose tag is known ("": no item).
func (p precond) checkTag(tag, what string) error {
	if p.holds(tag) {
		return nil
	}
	var detail string
	switch {
	case tag == "":
		detail = fmt.Sprintf("%s does not exist, and If-Match asks for it", what)
	case p.noneMatch != nil && anyTag(p.noneMatch, tag, true):
		detail = fmt.Sprintf("%s exists (ETag %s), and If-None-Match asks for it not to", what, tag)
	case p.match != nil && anyTag(p.match, tag, true):
		// its own tag made weak (a compressing proxy between rewrites
		// ETags so): "changed since it was read" would send the client
		// to read it again, through the same proxy, for the same tag
		detail = fmt.Sprintf("%s has not changed, but If-Match names its ETag as weak (W/%s), and If-Match compares strongly (RFC 9110 §13.1.1), so a weak tag never matches; send the ETag as gatehouse gave it, %s", what, tag, tag)
	case p.read:
		detail = fmt.Sprintf("%s has another ETag, %s, than If-Match names", what, tag)
	default:
		detail = fmt.Sprintf("%s has changed since it was read: its ETag is %s, not the one in If-Match; GET it again", what, tag)
	}
	return &statusError{http.StatusPreconditionFailed, detail}
}

// untagged checks p for a GET or HEAD of what, which exists but carries
// no ETag (a list, the clusters): it returns 304 when If-None-Match is *,
// 0 to answer in full, or the 412 of an If-Match naming tags. RFC 9110
// §13.1.1 has a server evaluate If-Match on every method, and a tag can
// match only a representation that has one: ignored, a client that sent
// an item's tag to its list (or a tag it kept from another gateway's
// answer) took the list for the version it meant. * asks only that the
// resource exist, and a list always does.
func (p precond) untagged(what string) (int, error) {
	if p.match != nil && !slices.Contains(p.match, "*") {
		return 0, &statusError{http.StatusPreconditionFailed, fmt.Sprintf(
			"%s carries no ETag, so an If-Match naming one never matches (RFC 9110 §13.1.1); send If-Match: * or none", what)}
	}
	if slices.Contains(p.noneMatch, "*") {
		return http.StatusNotModified, nil
	}
	return 0, nil
}

// unreadable is the 412 for an item whose stored value does not decode:
// it has no ETag, so no condition can be checked against it.
func unreadable(what string) error {
	return &statusError{http.StatusPreconditionFailed, fmt.Sprintf(
		"%s is stored but does not read, so it has no ETag to check If-Match or If-None-Match against; PUT or DELETE it without them", what)}
}

// etag is the strong entity tag of an item: the first 128 bits of the
// SHA-256 of its JSON, which is its stored form (internal/store marshals
// the same types).
func etag(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// itemTag is the ETag of body when it is one item, "" otherwise (a list,
// nothing).
func itemTag(body any) string {
	switch body.(type) {
	case route.App, *route.App, route.Domain, *route.Domain, route.Zone, *route.Zone,
		route.Record, *route.Record, route.HostKey, *route.HostKey:
		if v := reflect.ValueOf(body); v.Kind() == reflect.Pointer && v.IsNil() {
			return ""
		}
		return etag(body)
	}
	return ""
}

// itemWhat names body, one item, as the writes' 412s and 404s name it
// (`app "shop"`, `record www.z A`).
func itemWhat(body any) string {
	switch v := body.(type) {
	case *route.App:
		return fmt.Sprintf("app %q", v.ID)
	case *route.Domain:
		return fmt.Sprintf("domain %q", v.Domain)
	case route.Zone:
		return fmt.Sprintf("zone %q", v.Name)
	case *route.Zone:
		return fmt.Sprintf("zone %q", v.Name)
	case *route.Record:
		return fmt.Sprintf("record %s %s", v.Name, v.Type)
	case *route.HostKey:
		return fmt.Sprintf("host key %q", v.HostID)
	}
	return "the item"
}

// writeIf replaces an item by next, or deletes it when next is nil, in
// one step of the store's update, and only if p holds for the item it
// finds there; it returns the item replaced (nil: none). update is the
// store's Update method bound to the item's key. Deleting nothing is a
// 404, as an unconditional DELETE's.
func writeIf[T any](a *API, p precond, what string, next *T, update func(fn func(cur *T) (*T, error)) error) (*T, error) {
	var old *T
	err := update(func(cur *T) (*T, error) {
		old = cur
		if next == nil && cur == nil {
			return nil, &statusError{http.StatusNotFound, what + " not found"}
		}
		if err := check(p, cur, what); err != nil {
			return nil, err
		}
		return next, nil
	})
	if a.badValue(err) {
		return nil, unreadable(what)
	}
	return old, err
}

// conds is r's conditions. serve has refused a request whose fields do not
// parse, so a handler reads them without an error to handle.
func conds(r *http.Request) precond {
	p, _ := preconditions(r)
	return p
}
