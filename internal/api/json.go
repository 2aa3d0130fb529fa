package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// errBadInput marks a client error: answered 400 with its text.
type errBadInput struct{ msg string }

func (e *errBadInput) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &errBadInput{fmt.Sprintf(format, args...)}
}

// decode reads r's body as exactly one JSON value into v, refusing
// unknown fields. An empty body decodes as {}.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &statusError{http.StatusUnsupportedMediaType, "the body must be application/json"}
		}
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", mb.Limit)}
		}
		return badInput("reading the body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badInput("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badInput("invalid JSON body: more than one JSON value")
	}
	return nil
}

// statusError is an error answered with a given status.
type statusError struct {
	status int
	detail string
}

func (e *statusError) Error() string { return e.detail }

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

// fail answers err: the one place where API errors become statuses.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var bi *errBadInput
	var se *statusError
	switch {
	case errors.As(err, &bi):
		problem.Write(w, http.StatusBadRequest, bi.msg)
	case errors.As(err, &se):
		problem.Write(w, se.status, se.detail)
	case errors.Is(err, a.o.NotFound), errors.Is(err, errNotFound):
		problem.Write(w, http.StatusNotFound, "not found")
	default:
		a.o.Logger.Error("api: store failed", "method", r.Method, "path", r.URL.Path, "err", err)
		problem.Write(w, http.StatusInternalServerError, "the store failed; try again")
	}
}

// errNotFound is the API's own not-found, for items it looks up itself.
var errNotFound = errors.New("api: not found")
