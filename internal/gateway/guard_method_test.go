package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// guardWait is the read_header_timeout of the servers below: long, so
// that a guard waiting for a head that never ends is seen for what it is
// (the server closing, with no answer, once it is over), not mistaken for
// a slow answer.
const guardWait = 20 * time.Second

// slowHeaded serves e's gateway behind the guard with read_header_timeout
// guardWait and returns its address.
func slowHeaded(t *testing.T, e *env) string {
	t.Helper()
	return guardedGateway(t, e, func(s *http.Server) { s.ReadHeaderTimeout = guardWait })
}

// answerTo writes raw on a connection to addr and reads until the server
// closes it (bounded, should it never, well past guardWait). With served,
// it first sends served and waits for its answer, which it returns
// before the rest: raw then begins while net/http waits for a request on
// a kept-alive connection.
func answerTo(t *testing.T, addr, served string, raw ...string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * guardWait))
	var out bytes.Buffer
	r := bufio.NewReader(io.TeeReader(c, &out))
	if served != "" {
		if _, err := io.WriteString(c, served); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("answer to %q: %v", served, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	for _, s := range raw {
		if _, err := io.WriteString(c, s); err != nil {
			break // refused before the rest was written
		}
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatalf("%v after %q", err, out.Bytes())
	}
	return out.String()
}

// clientHello is the start of a TLS 1.x ClientHello record: a handshake
// record header and a ClientHello's first bytes, with no line end in
// them, as a client sends it and then waits for the ServerHello.
const clientHello = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"

// TestGuardRefusesWhatNoRequestLineBeginsWith: bytes that cannot begin a
// request line (a TLS ClientHello sent to the plaintext listener, above
// all) get the 400 problem at once, and the connection is closed: before
// the fix the guard waited for the end of a head until
// read_header_timeout and closed with no answer. A blank line before a
// request stays allowed where net/http allows it, and an honest request
// before such bytes on the connection is answered first.
func TestGuardRefusesWhatNoRequestLineBeginsWith(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	addr := slowHeaded(t, e)
	const (
		get  = "GET / HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n"
		post = "POST / HTTP/1.1\r\nHost: hello.apps.test\r\nContent-Length: 2\r\n\r\nok"
	)
	tests := []struct {
		name, served string
		raw          []string
	}{
		{"tls client hello", "", []string{clientHello}},
		{"nul", "", []string{"\x00\x00\x00\x01"}},
		{"space before the method", "", []string{" GET / HTTP/1.1"}},
		// net/http skips the CRLF a POST body is followed by, as
		// RFC 9112 §2.2 allows; the guard does as well.
		{"after a blank line", post, []string{"\r\n", clientHello}},
		{"delete", "", []string{"\x7fELF"}},
		{"utf-8", "", []string{"ÉCRIRE / HTTP/1.1"}},
		{"pipelined after an honest request", "", []string{get + clientHello}},
		{"on a kept-alive connection", get, []string{clientHello}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := answerTo(t, addr, tt.served, tt.raw...)
			if out == "" {
				t.Fatalf("the connection closed with no answer (read_header_timeout %v over)", guardWait)
			}
			res, body := lastAnswer(t, out)
			wantConnProblem(t, res, body, http.StatusBadRequest, "the request does not begin with a method")
		})
	}
}

// TestGuardAnswersATLSClientAtOnce: a crypto/tls client dialling the
// plaintext listener is told at once that what answers is no TLS server
// (it reads the 400 as a record header it cannot be), the error curl
// gives as "wrong version number", rather than losing the connection once
// read_header_timeout is over.
func TestGuardAnswersATLSClientAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	addr := slowHeaded(t, e)
	for _, next := range []string{"", "h2", "http/1.1"} {
		t.Run("alpn "+next, func(t *testing.T) {
			t.Parallel()
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			_ = raw.SetDeadline(time.Now().Add(3 * guardWait))
			conf := &tls.Config{ServerName: "hello.apps.test", InsecureSkipVerify: true}
			if next != "" {
				conf.NextProtos = []string{next}
			}
			err = tls.Client(raw, conf).Handshake()
			var rh tls.RecordHeaderError
			if !errors.As(err, &rh) || !bytes.Equal(rh.RecordHeader[:], []byte("HTTP/")) {
				t.Fatalf("handshake: %v, want the record header error of an HTTP answer", err)
			}
		})
	}
}

// TestGuardPassesWhatARequestLineBeginsWith: bytes that begin a request
// line, or HTTP/2's preface, pass the guard unchanged however they come,
// and a client that sends its request a byte at a time is served. (An
// h2c preface is net/http's to answer: tracking ends at its line.)
func TestGuardPassesWhatARequestLineBeginsWith(t *testing.T) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
		"M-SEARCH * HTTP/1.1\r\n\r\n",
		"!#$%&'*+-.^_`|~09az / HTTP/1.1\r\n\r\n",
		"G",
	} {
		for _, await := range []bool{false, true} {
			if got := through([]byte(s), 1, 3, await, 0); string(got) != s {
				t.Errorf("await %v: %q became %q", await, s, got)
			}
		}
	}

	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "slow "+r.URL.Path)
	}))
	addr := slowHeaded(t, e)
	req := "GET /a HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: close\r\n\r\n"
	out := answerTo(t, addr, "", strings.Split(req, "")...)
	res, body := lastAnswer(t, out)
	if res.StatusCode != http.StatusOK || string(body) != "slow /a" {
		t.Fatalf("got %q, want the host's answer", out)
	}
}
