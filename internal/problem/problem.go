// Package problem writes the errors the gateway answers itself as RFC 9457
// application/problem+json bodies (DESIGN §2): type, title, status, detail,
// never a stack trace or an internal address.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// ContentType is the media type of every problem body.
const ContentType = "application/problem+json"

// Write answers w with status and detail. The type is "about:blank" and the
// title the status's standard text, as RFC 9457 §4.2.1 suggests when no more
// specific type exists. detail must not carry internal addresses.
func Write(w http.ResponseWriter, status int, detail string) {
	WriteProblem(w, Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// WriteProblem answers w with p.
func WriteProblem(w http.ResponseWriter, p Problem) {
	b, _ := json.Marshal(p) // a struct of strings and an int cannot fail
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// GetOnly answers 405, with Allow, a request to a route that takes GET
// and HEAD only: net/http's own 405 is plain text.
func GetOnly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	Write(w, http.StatusMethodNotAllowed, r.Method+" is not allowed here: GET or HEAD")
}
