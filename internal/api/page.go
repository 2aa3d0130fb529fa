package api

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
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
//
// A page is not free either: JetStream keeps no order of keys to start
// from, so a page lists every key of the bucket (some 15 MB for a moment
// at 50,000 apps; 16 pages at once took the gateway from 180 to 310 MB),
// unless the store can take the names from the routing table (apps and
// domains, while the table follows the store: internal/store's
// tablepage.go). So pages take turns too, maxPageLists at once.

// defaultLimit is a page's size when after is given without limit.
const defaultLimit = 100

// maxLimit is the largest page; the store's bound too (store.MaxPage).
const maxLimit = 1000

// maxWholeLists bounds the whole lists built at once on one gateway, and
// maxPageLists the pages.
const (
	maxWholeLists = 2
	maxPageLists  = 4
)

// pageReq is a list request's paging: none (whole), or a page.
type pageReq struct {
	paged bool
	after string
	limit int
}

// pageOf reads r's limit and after. Either one asks for a page; a limit
// that is no integer from 1 to maxLimit in plain decimal, a field given
// twice, or a query
// that does not parse, is refused (400): guessing would page differently
// than the client meant.
func pageOf(r *http.Request) (pageReq, error) {
	q, err := query(r, "limit", "after") // ?limit=%zz would answer the whole list
	if err != nil {
		return pageReq{}, err
	}
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
		// Atoi takes 010 and +1 too: 010 is 8 to a client that
		// reads it as octal, and no client needs a spelling other
		// than the plain one, so only it is taken.
		n, err := strconv.Atoi(s[0])
		if err != nil || n < 1 || n > maxLimit || strconv.Itoa(n) != s[0] {
			return pageReq{}, badInput("limit: want an integer from 1 to %d in plain decimal (no sign, no leading zero), got %q", maxLimit, s[0])
		}
		p.limit = n
	}
	return p, nil
}

// query is r's query, refused (400) when a pair does not parse or names
// a field the route does not take (takes; none: it takes no query).
// URL.Query drops a pair that does not parse (a bad %-escape, a ';'
// separator), and with it a field the client sent: ?after=a&limit=10;
// would be a page of 100, ?type=TXT; a question for the default type. A
// field not taken was ignored likewise: ?Limit=10 answered the whole
// list, ?Type=TXT the question for A, and a PUT's ?dryRun=1 wrote.
// A GET or HEAD takes _ (cacheBuster) besides, and q leaves it out.
func query(r *http.Request, takes ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badInput("the query %q does not parse (%v): send each field %%-escaped, the fields separated by &", bounded(r.URL.RawQuery), err)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		// jQuery's cache: false and many dashboards add ?_=<time> to
		// every GET so that no cache answers it: it asks for nothing,
		// and refusing it shut them out. A write gets none from them.
		delete(q, cacheBuster)
	}
	// sorted: of several such fields, the same one is named every time
	for _, f := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(takes, f) {
			return nil, notTaken(f, takes)
		}
	}
	return q, nil
}

// cacheBuster is the query field every GET and HEAD takes and ignores.
const cacheBuster = "_"

// notTaken is the refusal of query field f on a route that takes only
// takes.
func notTaken(f string, takes []string) error {
	for _, t := range takes {
		if strings.EqualFold(f, t) {
			return badInput("the query field %q is not taken here: field names are case-sensitive; did you mean %q?", bounded(f), t)
		}
	}
	if f == cacheBuster {
		return badInput("the query field %q is not taken here: it is taken on a GET or HEAD only, as a cache-buster", f)
	}
	if len(takes) == 0 {
		return badInput("the query field %q is not taken here: this route takes no query", bounded(f))
	}
	quoted := make([]string, len(takes))
	for i, t := range takes {
		quoted[i] = strconv.Quote(t)
	}
	return badInput("the query field %q is not taken here: this route takes %s", bounded(f), strings.Join(quoted, " and "))
}

// bounded is s cut to 100 bytes for an error: s is the client's.
func bounded(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

// takeTurns serves h, a list route, once the request has one of the
// turns for its kind of list, whole or page (a request whose paging does
// not parse needs none: it is refused unread), waiting for one until its
// context ends, and holding it until the answer is written.
func (a *API) takeTurns(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := pageOf(r)
		if err != nil {
			h.ServeHTTP(w, r)
			return
		}
		turns := a.lists
		if p.paged {
			turns = a.pages
		}
		select {
		case turns <- struct{}{}:
			defer func() { <-turns }()
		case <-r.Context().Done():
			// the client has gone; this answer is for the log
			w.Header().Set("Retry-After", "1")
			problem.Write(w, http.StatusServiceUnavailable, "waited for a turn to list; try again")
			return
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
// into the list's order in zone (name, a space, type; listRecords). A
// cursor without a type starts at that name's first record set. The
// name and the type are read as a record route reads them (recordName,
// recordType): relative to the zone, "@" for the apex, in any case, with
// or without the final dot. Compared as typed, "www/A" sorted before
// "www.{zone} A" and repeated it, "@/A" and "WWW/A" before every name,
// so the paging started over, and "www/a" after every type of www,
// skipping them. A cursor no record could have is refused, naming after.
func recordAfter(after, zone string) (string, error) {
	if after == "" {
		return "", nil
	}
	name, typ, hasType := strings.Cut(after, "/")
	n, err := recordName(name, zone)
	if err != nil {
		return "", badInput("after: %v", err)
	}
	if !hasType {
		return n, nil
	}
	t, err := recordType(typ)
	if err != nil {
		return "", badInput("after: %v", err)
	}
	return n + " " + t, nil
}
