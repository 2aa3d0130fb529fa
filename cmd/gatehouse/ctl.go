package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-dev/gatehouse/internal/config"
)

const ctlUsage = `usage: gatehouse ctl [-api URL] [-token TOKEN] RESOURCE VERB [NAME...] [-f FILE | JSON]

resources and verbs:
  apps     list | get APP | put APP [BODY] | delete APP
  domains  list | get DOMAIN | put DOMAIN BODY | delete DOMAIN | verify DOMAIN BODY
  keys     list | get HOST_ID | put HOST_ID BODY | delete HOST_ID
  zones    list | get ZONE | put ZONE BODY | delete ZONE
  records  list ZONE | get ZONE NAME TYPE | put ZONE NAME TYPE BODY | delete ZONE NAME TYPE
  hosts    list
  clusters list

BODY is a JSON argument or -f FILE (- for stdin), at most 1 MiB. A put replaces the whole
item: a field left out of BODY takes its default, whatever the item held.
The response is printed as JSON; a non-2xx answer prints the problem detail
and exits 1. An item's ETag is printed on stderr; -if-match ETAG makes a
put, delete or verify go through only while the item still has that tag
(412 once another writer has changed it; so: get, edit, put -if-match), and
-if-none-match '*' makes a put create only.

A list answers every item at once. On a large platform page it instead:
-limit N (1 to 1000) answers at most N items, with "next" when more
follow; pass that as -after for the next page.

examples:
  gatehouse ctl -token $T apps put shop '{"cors":{"origins":["https://shop.example"]}}'
  gatehouse ctl -token $T keys put web-1 '{"public_key":"...","apps":["shop"]}'
  gatehouse ctl -token $T domains verify shop.example.org '{"method":"manual"}'
  gatehouse ctl -token $T apps get shop > shop.json     # ETag: "1f0c...e9" on stderr
  gatehouse ctl -token $T -if-match 1f0c...e9 apps put shop -f shop.json
  gatehouse ctl -token $T -limit 1000 -after app-0999 apps list

flags:
`

// ctlResource maps a resource to its collection path and the number of
// name segments an item takes.
var ctlResources = map[string]struct {
	base  string
	names int
	verbs string
}{
	"apps":     {"/api/v3/apps", 1, "list get put delete"},
	"domains":  {"/api/v3/domains", 1, "list get put delete verify"},
	"keys":     {"/api/v3/hosts/keys", 1, "list get put delete"},
	"zones":    {"/api/v3/dns/zones", 1, "list get put delete"},
	"records":  {"/api/v3/dns/zones", 3, "list get put delete"},
	"hosts":    {"/api/v3/hosts", 0, "list"},
	"clusters": {"/api/v3/discovery/clusters", 0, "list"},
}

// ctlRequest is one parsed ctl invocation.
type ctlRequest struct {
	method, path string
	body         []byte
	// ifMatch and ifNoneMatch are sent as If-Match and If-None-Match
	// when set.
	ifMatch, ifNoneMatch string
	// item: the request is about one item, which has an ETag.
	item bool
	// pages: the request is a list that the API pages.
	pages bool
}

// page makes req ask for one page: limit items (0: the default, or the
// whole list without after) after the cursor after.
func (req *ctlRequest) page(limit int, after string) error {
	if limit == 0 && after == "" {
		return nil
	}
	if !req.pages {
		return usagef("ctl: -limit and -after are for list (of apps, domains, keys, zones, records and hosts)")
	}
	if limit < 0 || limit > 1000 {
		return fmt.Errorf("ctl: -limit must be 1 to 1000, got %d", limit)
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	req.path += "?" + q.Encode()
	return nil
}

// runCtl drives the control API: it builds one request from the command
// line, sends it and prints the answer.
func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gatehouse ctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// GATEHOUSE_API is not the flag's default either: -h prints defaults,
	// and the URL may carry a password
	api := fs.String("api", "", "base URL of the control API (default GATEHOUSE_API, else http://127.0.0.1:9180)")
	// not the variable as the flag's default: -h prints defaults, and the
	// token is a secret
	token := fs.String("token", "", "platform bearer token (default GATEHOUSE_CONTROL_TOKEN)")
	file := fs.String("f", "", "read the JSON body from `FILE` (- for stdin)")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	ifMatch := fs.String("if-match", "", "send If-Match: the write goes through only while the item's ETag is `ETAG` (quotes optional; * for any item)")
	ifNoneMatch := fs.String("if-none-match", "", "send If-None-Match: * for a put that only creates; an `ETAG` for a get answered only if the item changed")
	limit := fs.Int("limit", 0, "list at most `N` items (1 to 1000), one page; 0: the whole list")
	after := fs.String("after", "", "list the page after `CURSOR`, the \"next\" of the page before")
	fs.Usage = func() { fmt.Fprint(fs.Output(), ctlUsage); fs.PrintDefaults() }
	// flags may come before or after the positional words
	var pos []string
	for {
		if err := parseFlags(fs, args, stdout); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *timeout <= 0 {
		// Taken as given (0 is not "no timeout", as curl's -m 0 is), the
		// request's deadline passed before it was sent: "context deadline
		// exceeded", as if the API never answered.
		return fmt.Errorf("ctl: -timeout must be positive, got %s", *timeout)
	}
	tokenFrom := "-token"
	if *token == "" {
		// An explicit -token "" is refused, not read as "no token" nor
		// as "the variable's": it is most often -token "$T" with T
		// unset, and going on would send the variable's token (which
		// may be another platform's) or none, which every control route
		// answers 401, without saying the flag was what went wrong.
		if ctlFlagGiven(fs, "token") {
			return errors.New("ctl: -token is empty (an unset variable in -token \"$T\"?): give the token, or leave -token out to use GATEHOUSE_CONTROL_TOKEN")
		}
		*token, tokenFrom = os.Getenv("GATEHOUSE_CONTROL_TOKEN"), "GATEHOUSE_CONTROL_TOKEN"
	}
	// A variable set from a file's contents keeps its line break: the
	// HTTP client's refusal of the header does not say the token is
	// what to fix. The token itself is not repeated.
	if i := strings.IndexFunc(*token, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("ctl: the token in %s holds white space or a control byte (here %#02x), which no Authorization header carries (a control token or a JWT has none)", tokenFrom, (*token)[i])
	}
	// from names where a refused URL came from: the operator who set
	// the variable would look for a flag the command line does not hold.
	from := "-api"
	if *api == "" {
		// As -token "": most often -api "$URL" with URL unset, which
		// would send the token to the variable's gateway or the default
		// one without a word.
		if ctlFlagGiven(fs, "api") {
			return errors.New("ctl: -api is empty (an unset variable in -api \"$URL\"?): give the control API's base URL, or leave -api out to use GATEHOUSE_API, else http://127.0.0.1:9180")
		}
		if v := os.Getenv("GATEHOUSE_API"); v != "" {
			*api, from = v, "GATEHOUSE_API"
		} else {
			*api = "http://127.0.0.1:9180"
		}
	}
	base, err := url.Parse(*api)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("ctl: %s must be an http(s) URL, got %q", from, config.RedactURL(*api))
	}
	// The resource's path is appended to the URL's: after a query or a
	// fragment it would be sent as part of those, to "/", the dashboard.
	if base.RawQuery != "" || base.ForceQuery || base.Fragment != "" || strings.Contains(*api, "#") {
		return fmt.Errorf("ctl: %s must be a base URL without a query or fragment, like http://127.0.0.1:9180, got %q", from, config.RedactURL(*api))
	}
	req, err := ctlParse(pos, *file)
	if err != nil {
		return err
	}
	req.ifMatch, req.ifNoneMatch = ctlTag(*ifMatch), ctlTag(*ifNoneMatch)
	if (req.ifMatch != "" || req.ifNoneMatch != "") && !req.item {
		return usagef("ctl: -if-match and -if-none-match are for get, put, delete and verify of one item; a list has no ETag")
	}
	if err := req.page(*limit, *after); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	return ctlDo(ctx, strings.TrimSuffix(base.String(), "/")+req.path, *token, req, stdout, stderr)
}

// ctlFlagGiven reports whether the command line set flag name, to an
// empty value too.
func ctlFlagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// ctlTag quotes an ETag given without its quotes, as a shell makes easy
// to type; "*", a quoted tag and a weak one are sent as given.
func ctlTag(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || s == "*" || strings.HasPrefix(s, `"`) || strings.HasPrefix(s, "W/") {
		return s
	}
	return `"` + s + `"`
}

// ctlParse turns RESOURCE VERB [NAME...] [JSON] into a request.
func ctlParse(pos []string, file string) (ctlRequest, error) {
	if len(pos) < 2 {
		return ctlRequest{}, usagef("ctl: want RESOURCE VERB [NAME] (see gatehouse ctl -h)")
	}
	resName, verb, rest := pos[0], pos[1], pos[2:]
	res, ok := ctlResources[resName]
	if !ok {
		return ctlRequest{}, usagef("ctl: unknown resource %q (apps, domains, keys, zones, records, hosts, clusters)", resName)
	}
	if !strings.Contains(" "+res.verbs+" ", " "+verb+" ") {
		return ctlRequest{}, usagef("ctl: %s takes %s, not %q", resName, strings.ReplaceAll(res.verbs, " ", ", "), verb)
	}
	names := res.names
	if verb == "list" {
		names = 0
		if resName == "records" {
			names = 1 // the zone
		}
	}
	if len(rest) < names {
		return ctlRequest{}, usagef("ctl: %s %s needs %d name(s)", resName, verb, names)
	}
	path := res.base
	for _, n := range rest[:names] {
		// PathEscape leaves dots alone: "." and ".." would be steps of
		// the path, not a name in it, and name another item once the
		// path is cleaned (records/./.. is the zone).
		if n == "" || n == "." || n == ".." {
			return ctlRequest{}, fmt.Errorf("ctl: %s %s: a name cannot be %q", resName, verb, n)
		}
		path += "/" + url.PathEscape(n)
	}
	if resName == "records" {
		// zones/{zone}/records[/{name}/{type}]
		parts := strings.SplitN(strings.TrimPrefix(path, res.base+"/"), "/", 2)
		path = res.base + "/" + parts[0] + "/records"
		if len(parts) == 2 {
			path += "/" + parts[1]
		}
	}
	rest = rest[names:]
	var body []byte
	switch verb {
	case "put", "verify":
		b, err := ctlBody(rest, file)
		if err != nil {
			return ctlRequest{}, err
		}
		body = b
		rest = nil
	}
	if len(rest) > 0 {
		return ctlRequest{}, usagef("ctl: unexpected argument %q", rest[0])
	}
	if file != "" && body == nil {
		return ctlRequest{}, usagef("ctl: -f is only for put and verify")
	}
	method := map[string]string{"list": "GET", "get": "GET", "put": "PUT", "delete": "DELETE", "verify": "POST"}[verb]
	if verb == "verify" {
		path += "/verify"
	}
	return ctlRequest{method: method, path: path, body: body, item: verb != "list" && names > 0,
		pages: verb == "list" && resName != "clusters"}, nil
}

// ctlBody reads the body from -f or the single JSON argument; none is {}.
func ctlBody(rest []string, file string) ([]byte, error) {
	var b []byte
	// where names the body's source in its refusal ("in FILE"): an
	// empty file, left by a "get > FILE" that failed, said only
	// "unexpected end of JSON input".
	where := ""
	switch {
	case file != "" && len(rest) > 0:
		return nil, usagef("ctl: give the body as -f FILE or as an argument, not both")
	case len(rest) > 1:
		return nil, usagef("ctl: unexpected argument %q (quote the JSON body as one argument)", rest[1])
	case file == "-":
		var err error
		where = " on stdin"
		if b, err = ctlReadBody(os.Stdin, "on stdin"); err != nil {
			return nil, err
		}
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("ctl: %v", err)
		}
		defer f.Close()
		where = " in " + file
		if b, err = ctlReadBody(f, "in "+file); err != nil {
			return nil, err
		}
	case len(rest) == 1:
		b = []byte(rest[0])
	default:
		b = []byte("{}")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("ctl: the body%s is empty: give a JSON object ({} for every default)", where)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("ctl: the body%s is not valid JSON: %v (at byte %d)", where, err, se.Offset)
		}
		return nil, fmt.Errorf("ctl: the body%s is not valid JSON: %v", where, err)
	}
	return b, nil
}

// ctlMaxBody is the control API's bound on a request body (internal/api):
// ctl reads no more, so that -f /dev/zero, or a pipe that never closes,
// is refused rather than read until memory or patience runs out.
const ctlMaxBody = 1 << 20

// ctlReadBody reads a body from r, where names it ("in FILE").
func ctlReadBody(r io.Reader, where string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, ctlMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("ctl: reading the body %s: %v", where, err)
	}
	if len(b) > ctlMaxBody {
		return nil, fmt.Errorf("ctl: the body %s is larger than %d MiB, which the control API refuses", where, ctlMaxBody>>20)
	}
	return b, nil
}

// ctlMaxAnswer bounds the answer ctl reads and holds.
const ctlMaxAnswer = 64 << 20

// ctlDo sends req and prints the answer: JSON on stdout, or the problem
// detail on stderr with an error for a non-2xx status.
func ctlDo(ctx context.Context, u, token string, req ctlRequest, stdout, stderr io.Writer) error {
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return fmt.Errorf("ctl: %v", err)
	}
	// Messages name the path as sent: under -api's own path, if it has
	// one, which the route alone would hide (-api .../api/v3 sends
	// /api/v3/api/v3/apps, answered 404).
	sent := hr.URL.RequestURI()
	hr.Header.Set("Accept", "application/json")
	if req.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	if req.ifMatch != "" {
		hr.Header.Set("If-Match", req.ifMatch)
	}
	if req.ifNoneMatch != "" {
		hr.Header.Set("If-None-Match", req.ifNoneMatch)
	}
	// No redirect is followed: the control API answers none of its own,
	// and net/http's client would turn a put or a delete answered 301 or
	// 302 into a GET of the new URL, whose answer would read as the
	// write's, and send the token on to a 307's or 308's target.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(hr)
	if err != nil {
		return fmt.Errorf("ctl: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, ctlMaxAnswer+1))
	if err != nil {
		return fmt.Errorf("ctl: reading the answer: %v", err)
	}
	if len(b) > ctlMaxAnswer {
		// cut short, it would read as no JSON at all, which says -api is wrong
		return fmt.Errorf("ctl: %s %s: %d %s but the answer is larger than %d MiB; list in pages with -limit and -after",
			req.method, sent, res.StatusCode, http.StatusText(res.StatusCode), ctlMaxAnswer>>20)
	}
	if tag := res.Header.Get("ETag"); tag != "" {
		fmt.Fprintf(stderr, "ETag: %s\n", tag)
	}
	if res.StatusCode/100 != 2 && res.StatusCode != http.StatusNotModified {
		var p struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
		}
		msg := strings.TrimSpace(string(b))
		switch {
		case json.Unmarshal(b, &p) == nil && (p.Detail != "" || p.Title != ""):
			msg = p.Detail
			if msg == "" {
				msg = p.Title
			}
		case len(msg) > 0 && !json.Valid(b):
			// Not the control API's problem+json: printed whole, another
			// server's error page (up to ctlMaxAnswer) would bury the
			// status. Plain text (Go's own 400 or 431 before any handler,
			// a proxy's 502) is worth its first line; anything else says
			// -api may be wrong, as for a 2xx.
			if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "text/plain" {
				return fmt.Errorf("ctl: %s %s: %d %s but the answer is not JSON (Content-Type %q): is -api the control API's base URL?",
					req.method, sent, res.StatusCode, http.StatusText(res.StatusCode), res.Header.Get("Content-Type"))
			}
			msg = strconv.Quote(ctlExcerpt(msg))
		}
		if res.StatusCode == http.StatusUnauthorized && token == "" {
			msg += " (ctl sent no token: give -token, or set GATEHOUSE_CONTROL_TOKEN)"
		}
		if ra := res.Header.Get("Retry-After"); ra != "" {
			msg += " (Retry-After: " + retryAfterText(ra) + ")"
		}
		if loc := res.Header.Get("Location"); res.StatusCode/100 == 3 && loc != "" {
			msg = fmt.Sprintf("redirected to %s, which ctl does not follow: is -api the control API's base URL?", config.RedactURL(loc))
		}
		return fmt.Errorf("ctl: %s %s: %d %s: %s", req.method, sent, res.StatusCode, http.StatusText(res.StatusCode), msg)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		fmt.Fprintf(stderr, "%s %s: %d %s\n", req.method, sent, res.StatusCode, http.StatusText(res.StatusCode))
		return nil
	}
	// Every control route answers JSON: anything else (the dashboard's
	// page, a proxy's) is not the control API, whatever its status.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("ctl: %s %s: %d %s but the answer is not JSON (Content-Type %q): is -api the control API's base URL?",
			req.method, sent, res.StatusCode, http.StatusText(res.StatusCode), res.Header.Get("Content-Type"))
	}
	out.WriteByte('\n')
	_, err = stdout.Write(bytes.TrimRight(out.Bytes(), "\n"))
	fmt.Fprintln(stdout)
	return err
}

// ctlExcerptMax bounds the text of a plain-text error answer that ctl
// repeats: enough for a proxy's or net/http's one-line reason.
const ctlExcerptMax = 200

// ctlExcerpt is the first line of s, cut to ctlExcerptMax bytes on a
// UTF-8 boundary, with "…" where it was cut.
func ctlExcerpt(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	line = strings.TrimRight(line, "\r")
	if len(line) <= ctlExcerptMax {
		return line
	}
	i := ctlExcerptMax
	for i > 0 && !utf8.RuneStart(line[i]) {
		i--
	}
	return line[:i] + "…"
}

// retryAfterText is a Retry-After value as ctl says it: seconds as
// seconds, an HTTP-date as sent (RFC 9110 §10.2.3 allows either; a proxy
// in front of the control API may send a date), anything else quoted, as
// the server's words and not a number of seconds.
func retryAfterText(v string) string {
	if v != "" && strings.Trim(v, "0123456789") == "" {
		return v + " s"
	}
	if _, err := http.ParseTime(v); err == nil {
		return v
	}
	return strconv.Quote(ctlExcerpt(v))
}
