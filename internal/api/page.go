package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// A list route answers its whole list when asked with neither limit nor
// after: platforms written against the seed contract depend on that. A
// whole list costs the gateway the list several times over in memory (the
// store's values, raw and decoded, and the encoded answer): some 45 MB for
// 50,000 apps, most of a gigabyte for a million. So at most maxWholeLists
// are built at once, and the rest wait their turn; and a client pages
// instead with ?limit=N&after=CURSOR, which lists only the keys and reads
// only the page's values. A page that is not the last one says where the
// next starts in "next", the value to send as after; the last page has no
// "next".

// defaultLimit is a page's size when after is given without limit.
const defaultLimit = 100

// maxLimit is the largest page; the store's bound too (store.MaxPage).
const maxLimit = 1000

// maxWholeLists bounds the whole lists built at once on one gateway.
const maxWholeLists = 2

// pageReq is a list request's paging: none (whole), or a page.
type pageReq struct {
	paged bool
	after string
	limit int
}

// pageOf reads r's limit and after. Either one asks for a page; a limit
// that is no integer from 1 to maxLimit, or a field given twice, is
// refused (400): guessing would page differently than the client meant.
func pageOf(r *http.Request) (pageReq, error) {
	q := r.URL.Query()
	var p pageReq
	for _, f := range []string{"limit", "after"} {
		switch len(q[f]) {
		case 0:
			continue
		case 1:
			p.paged = true
		default:
			return pageReq{}, badInput("%s: given %d times; give it once", f, len(q[f]))
		}
	}
	if !p.paged {
		return p, nil
	}
	p.after, p.limit = q.Get("after"), defaultLimit
	if s, ok := q["limit"]; ok {
		n, err := strconv.Atoi(s[0])
		if err != nil || n < 1 || n > maxLimit {
			return pageReq{}, badInput("limit: want an integer from 1 to %d, got %q", maxLimit, s[0])
		}
		p.limit = n
	}
	return p, nil
}

// wholeLists serves h, a list route, and makes a request for a whole list
// wait for one of maxWholeLists turns first, until its context ends,
// holding it until the answer is written. A page needs no turn.
func (a *API) wholeLists(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, err := pageOf(r); err == nil && !p.paged {
			select {
			case a.lists <- struct{}{}:
				defer func() { <-a.lists }()
			case <-r.Context().Done():
				// the client has gone; this answer is for the log
				w.Header().Set("Retry-After", "1")
				problem.Write(w, http.StatusServiceUnavailable, "waited for a turn to list; try again, or page with ?limit=")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// listed is a list answer: the items under key, and next when more
// follow.
func listed[T any](key string, items []T, next string) map[string]any {
	m := map[string]any{key: nonNil(items)}
	if next != "" {
		m["next"] = next
	}
	return m
}

// recordAfter turns a records cursor, {name}/{type} as "next" gives it,
// into the list's order (name, a space, type; listRecords). A
// cursor without a type starts at that name's first record set.
func recordAfter(after string) string {
	if name, typ, ok := strings.Cut(after, "/"); ok {
		return name + " " + typ
	}
	return after
}
