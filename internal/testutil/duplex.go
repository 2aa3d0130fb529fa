package testutil

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// DuplexHost is a host that answers an upload as it reads it, for the
// tests that check an upload reaches a host whole when the host answers
// before it has all of it: its head goes out, alone, once it has read
// pre= bytes (none by default), and then it reads the rest and answers
// the length and SHA-256 of all it read, or the error that ended its
// read. At /early it answers "early" at once, reading none of the
// upload; a GET gets "next".
func DuplexHost(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		io.WriteString(w, "next")
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // else its own server drops the upload's rest as its head goes out
	if r.URL.Path == "/early" {
		io.WriteString(w, "early")
		return
	}
	pre, _ := strconv.ParseInt(r.URL.Query().Get("pre"), 10, 64)
	h := sha256.New()
	n, err := io.CopyN(h, r.Body, pre)
	if err == nil {
		w.WriteHeader(http.StatusOK)
		err = rc.Flush()
	}
	if err == nil {
		var m int64
		m, err = io.Copy(h, r.Body)
		n += m
	}
	if err != nil {
		fmt.Fprintf(w, "after %d bytes: %v", n, err)
		return
	}
	fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
}
