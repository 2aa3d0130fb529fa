package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gatehouse-dev/gatehouse/internal/jsontext"
	"github.com/gatehouse-dev/gatehouse/internal/logcut"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// errBadInput marks a client error: answered 400 with its text.
type errBadInput struct{ msg string }

func (e *errBadInput) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &errBadInput{fmt.Sprintf(format, args...)}
}

// decode reads r's body as exactly one JSON value into v (after a UTF-8
// byte order mark, if it starts with one), refusing
// invalid UTF-8, unknown fields and ambiguous keys (checkKeys), and a
// body that is null, and a body under a type other than JSON or a
// Content-Encoding (415). An empty body decodes as {} into a struct, and
// is refused for anything else.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			// Name the field and what it held: a sender whose body is
			// JSON (curl -d sends a form type) must learn it is the
			// header to fix. Bounded: the field is the client's.
			if len(ct) > 100 {
				ct = ct[:100] + "..."
			}
			// Accept in a 415 names the types a request's body may
			// have (RFC 9110 §15.5.16, §12.5.1), for a client that
			// reads fields rather than the detail
			return &headerError{&statusError{http.StatusUnsupportedMediaType, fmt.Sprintf("the body must be sent with Content-Type: application/json, got %q", ct)},
				"Accept", "application/json"}
		}
	}
	// No coding is decoded here, so a coded body would be read as its
	// coded bytes: gzip refused as "not valid UTF-8", which points at
	// the JSON, and a body the label misdescribes taken as it came.
	if ce := strings.Join(r.Header.Values("Content-Encoding"), ", "); coded(ce) {
		if len(ce) > 100 {
			ce = ce[:100] + "..."
		}
		// Accept-Encoding: identity in a 415 says no coding is taken
		// (RFC 9110 §15.5.16, RFC 7694 §3)
		return &headerError{&statusError{http.StatusUnsupportedMediaType, fmt.Sprintf("the body must be sent without Content-Encoding (the API decodes no gzip, br or other coding), got %q", ce)},
			"Accept-Encoding", "identity"}
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", mb.Limit)}
		}
		return badInput("reading the body: %v", err)
	}
	// One leading byte order mark, which PowerShell's and Notepad's
	// UTF-8 files start with, is not JSON and not the client's meaning:
	// RFC 8259 §8.1 lets a parser ignore it, and refused it was named
	// as an 'ï' the client never wrote.
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	if len(bytes.TrimSpace(b)) == 0 {
		// {} only where an object is wanted: elsewhere (a resolve
		// batch's array) the refusal would name an object the client
		// never sent
		if t := reflect.TypeOf(v); t.Kind() == reflect.Pointer && t.Elem().Kind() != reflect.Struct {
			return badInput("the body is empty: want %s", jsonKind(t))
		}
		b = []byte("{}")
	}
	if string(bytes.TrimSpace(b)) == "null" {
		// encoding/json decodes null into nothing: a PUT of an app
		// would write its defaults, its auth and policy gone.
		return badInput("invalid JSON body: want %s, got a JSON null", jsonKind(reflect.TypeOf(v)))
	}
	// encoding/json turns each invalid byte into U+FFFD: the body would
	// be stored as something its sender never wrote (a deny rule's path
	// that no request matches, a TXT value that proves nothing).
	if err := jsontext.Valid(b); err != nil {
		return badInput("invalid JSON body: %v", err)
	}
	if err := checkKeys(b, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// encoding/json's own text names the Go struct and type.
			got := "a JSON " + te.Value
			if n, ok := strings.CutPrefix(te.Value, "number "); ok && isInteger(te.Type) && strings.Trim(n, "-0123456789") == "" {
				got += " (out of range)"
			}
			if te.Field == "" {
				return badInput("invalid JSON body: want %s, got %s", jsonKind(te.Type), got)
			}
			return badInput("invalid JSON body: %s: want %s, got %s", te.Field, jsonKind(te.Type), got)
		}
		return badInput("invalid JSON body: %v", err)
	}
	if end := dec.InputOffset(); len(bytes.Trim(b[end:], jsonSpace)) > 0 {
		// not always a second value ({} x, {}]): say where the rest starts
		at := int(end) + len(b[end:]) - len(bytes.TrimLeft(b[end:], jsonSpace))
		return badInput("invalid JSON body: more than one JSON value, or text after it (from byte %d: %q); send one JSON value", at, excerpt(b[at:]))
	}
	return nil
}

// jsonSpace is the white space JSON allows between tokens (RFC 8259 §2).
const jsonSpace = " \t\r\n"

// excerpt is the start of b, at most 16 bytes (cut at a rune), for an
// error: enough to find it, little of the client's bytes.
func excerpt(b []byte) string {
	if len(b) <= 16 {
		return string(b)
	}
	n := 16
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "..."
}

// jsonKind names the JSON a field of Go type t takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another JSON value"
}

// isInteger reports whether Go type t holds whole numbers only.
func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// statusError is an error answered with a given status.
type statusError struct {
	status int
	detail string
}

func (e *statusError) Error() string { return e.detail }

// headerError is err answered with one more header field.
type headerError struct {
	err         error
	name, value string
}

func (e *headerError) Error() string { return e.err.Error() }
func (e *headerError) Unwrap() error { return e.err }

// coded reports whether a Content-Encoding list names a coding: any
// element but identity, which is none, however often it is listed.
func coded(list string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c = strings.Trim(c, " \t"); c != "" && !strings.EqualFold(c, "identity") {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// fail answers err: the one place where API errors become statuses. The
// lines it logs cut the method and path as the access log does (logcut): a
// route may read the store before it checks the path's every segment.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var bi *errBadInput
	var se *statusError
	if he := (*headerError)(nil); errors.As(err, &he) {
		w.Header().Set(he.name, he.value)
	}
	switch {
	case errors.As(err, &bi):
		problem.Write(w, http.StatusBadRequest, bi.msg)
	case errors.As(err, &se):
		problem.Write(w, se.status, se.detail)
	case errors.Is(err, a.o.NotFound), errors.Is(err, errNotFound):
		problem.Write(w, http.StatusNotFound, "not found")
	case a.badValue(err):
		a.o.Logger.Error("api: bad stored value", "method", logcut.Method(r.Method), "path", logcut.Path(r.URL.Path), "err", err)
		problem.Write(w, http.StatusInternalServerError, "the stored value does not read (written around this API?); PUT a new one or DELETE it")
	case a.o.TooLarge != nil && errors.Is(err, a.o.TooLarge):
		// Retrying cannot help: the stored form (JSON) of what was sent
		// is past the store's bound, though the body was not past ours.
		problem.Write(w, http.StatusRequestEntityTooLarge, "too large to store: at most 1 MiB once stored as JSON")
	case a.o.Unavailable != nil && a.o.Unavailable(err):
		a.o.Logger.Warn("api: store unavailable", "method", logcut.Method(r.Method), "path", logcut.Path(r.URL.Path), "err", err)
		w.Header().Set("Retry-After", "1")
		problem.Write(w, http.StatusServiceUnavailable, "the store (NATS JetStream) cannot answer now; try again")
	default:
		a.o.Logger.Error("api: store failed", "method", logcut.Method(r.Method), "path", logcut.Path(r.URL.Path), "err", err)
		problem.Write(w, http.StatusInternalServerError, "the store failed; try again")
	}
}

// badValue reports whether err is the store's refusal of a stored value
// that does not read (Options.BadValue).
func (a *API) badValue(err error) bool {
	return a.o.BadValue != nil && errors.Is(err, a.o.BadValue)
}

// errNotFound is the API's own not-found, for items it looks up itself.
var errNotFound = errors.New("api: not found")

// checkKeys refuses a body whose objects, at any depth, repeat a key or
// spell a field's key in another case. encoding/json takes the last of
// repeated keys and matches field names case-insensitively, so
// {"auth":{"required":true},"Auth":{"required":false}} would be taken
// silently as the last one, where another reader of the same bytes may
// take the first: the body must say one thing. It refuses a key that is
// no field too, naming where it is and the keys known there, and reads a
// value that decodes itself (route.Duration) so that its error names its
// key. t is the type decoded into; keys under a type it does not know
// are left to the decoder. A body that is not valid JSON is left to the
// decoder too.
func checkKeys(b []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers are skipped, never converted
	var path []string
	err := walkKeys(dec, b, t, &path)
	var ke *keyError
	if errors.As(err, &ke) {
		return badInput("invalid JSON body: %s", ke.msg)
	}
	return nil
}

// maxKeyDepth bounds the nesting checkKeys walks: the API's bodies nest
// a few levels, so a deeper body fails decoding anyway, and the walk
// stays shallow on any input.
const maxKeyDepth = 32

type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

// errDeep stops a walk that went past maxKeyDepth.
var errDeep = errors.New("api: too deep")

// walkKeys reads one value from dec, reading b, whose Go type is t (nil:
// unknown), checking the keys of every object in it. path names where it
// is.
func walkKeys(dec *json.Decoder, b []byte, t reflect.Type, path *[]string) error {
	if len(*path) > maxKeyDepth {
		return errDeep
	}
	ptr := t != nil && t.Kind() == reflect.Pointer
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		// It reads its own shape, so its keys are not fields; and its
		// error (a route.Duration's) names no key, as encoding/json
		// passes it on as is: read it here, where its path is known.
		start := dec.InputOffset()
		if err := walkKeys(dec, b, nil, path); err != nil {
			return err
		}
		return unmarshalAt(b[start:dec.InputOffset()], t, ptr, *path)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, b, t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			*path = append(*path, fmt.Sprintf("[%d]", i))
			start := dec.InputOffset()
			if err := walkKeys(dec, b, elem, path); err != nil {
				return err
			}
			// encoding/json reads a null element as the element's zero
			// value, so ["a",null] would be checked as ["a",""] and
			// refused for a value nobody sent (values[1]: got "").
			if elem != nil && elem.Kind() != reflect.Pointer && elem.Kind() != reflect.Interface && isNull(b[start:dec.InputOffset()]) {
				return &keyError{fmt.Sprintf("%s: want %s, got a JSON null", strings.TrimPrefix(strings.Join(*path, ""), "."), jsonKind(elem))}
			}
			*path = (*path)[:len(*path)-1]
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

func walkObject(dec *json.Decoder, b []byte, t reflect.Type, path *[]string) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := map[string]string{} // folded key -> the key as first written
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		fk := jsontext.FoldKey(key)
		if prev, dup := seen[fk]; dup {
			if prev == key {
				return &keyError{fmt.Sprintf("key %q appears twice%s", key, where(*path))}
			}
			return &keyError{fmt.Sprintf("keys %q and %q%s differ only in case", prev, key, where(*path))}
		}
		seen[fk] = key
		var child reflect.Type
		if fields != nil {
			if ft, ok := fields[key]; ok {
				child = ft
			} else {
				for name := range fields {
					if jsontext.FoldKey(name) == fk {
						return &keyError{fmt.Sprintf("key %q%s must be spelled %q (keys are case-sensitive)", key, where(*path), name)}
					}
				}
				if !embeds(t) { // else its fields are promoted ones jsonFields does not list
					// named here, where its place is known, rather than
					// by the decoder's DisallowUnknownFields, which does not say
					return &keyError{fmt.Sprintf("unknown field %q%s (known: %s)", key, where(*path), strings.Join(slices.Sorted(maps.Keys(fields)), ", "))}
				}
			}
		}
		*path = append(*path, "."+key)
		if err := walkKeys(dec, b, child, path); err != nil {
			return err
		}
		*path = (*path)[:len(*path)-1]
	}
	_, err := dec.Token()
	return err
}

// isNull reports whether raw, a value as walkKeys read it (from the end
// of the token before it), is a JSON null.
func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && (raw[0] == ',' || raw[0] == '[') {
		raw = bytes.TrimSpace(raw[1:])
	}
	return string(raw) == "null"
}

// unmarshalAt reads raw, the value at path (from the end of the token
// before it), as Go type t, which decodes itself, and names path in its
// error. A null where t is a pointer's is nil, and not read (ptr).
func unmarshalAt(raw []byte, t reflect.Type, ptr bool, path []string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && (raw[0] == ':' || raw[0] == ',') {
		raw = bytes.TrimSpace(raw[1:])
	}
	if ptr && string(raw) == "null" {
		return nil
	}
	if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
		if len(path) == 0 {
			return &keyError{err.Error()}
		}
		return &keyError{fmt.Sprintf("%s: %v", strings.TrimPrefix(strings.Join(path, ""), "."), err)}
	}
	return nil
}

// where names the object at path for an error: "" at the top, else
// " in policy[0]".
func where(path []string) string {
	if len(path) == 0 {
		return ""
	}
	return " in " + strings.TrimPrefix(strings.Join(path, ""), ".")
}

// fieldCache holds jsonFields' answers, one per struct type.
var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// jsonFields maps the JSON keys of struct t's fields, as encoding/json
// names them, to the fields' types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// embeds reports whether struct t has an embedded field.
func embeds(t reflect.Type) bool {
	for f := range t.Fields() {
		if f.Anonymous {
			return true
		}
	}
	return false
}
