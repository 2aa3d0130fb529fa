package problem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Raw is a whole HTTP/1.1 answer with a problem+json body, closing the
// connection as net/http's error answers do, for the places that answer
// on a connection no HTTP server holds (the framing guard, the https
// listener before TLS). It has no Date: the answers are made once; Dated
// adds it to each one sent.
func Raw(status int, detail string) []byte {
	body, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), ContentType, len(body), body)
}

// Dated returns answer with a Date field for now after its status line:
// a server with a clock dates every answer (RFC 9110 §6.6.1), which
// net/http's own error answers do not.
func Dated(answer []byte, now time.Time) []byte {
	i := bytes.Index(answer, []byte("\r\n")) + 2
	b := make([]byte, 0, len(answer)+len("Date: \r\n")+len(http.TimeFormat))
	b = append(append(b, answer[:i]...), "Date: "...)
	b = now.UTC().AppendFormat(b, http.TimeFormat)
	return append(append(b, "\r\n"...), answer[i:]...)
}
