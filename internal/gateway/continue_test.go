package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/internal/h2"
)

const uploadBody = "0123456789abcdef" // what each upload sends

// continueHost is a host of app "hello" for the Expect: 100-continue
// tests: what its handler does before reading the body, and what it read.
type continueHost struct {
	before func(w http.ResponseWriter, sent <-chan struct{}) // nil: read the body at once
	sent   chan struct{}                                     // closed once the client sent its body
	mu     sync.Mutex
	got    []string // each request's body as the host read it
}

func (h *continueHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.before != nil {
		h.before(w, h.sent)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.got = append(h.got, string(b))
	h.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (h *continueHost) bodies() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// continueCases are hosts that answer an upload's Expect: 100-continue
// in the ways hosts do.
var continueCases = []struct {
	name   string
	before func(w http.ResponseWriter, sent <-chan struct{})
	hints  int // 103 Early Hints the client must get
}{
	// Its server sends 100 as the handler reads: at once.
	{"prompt", nil, 0},
	// Its server sends 100 only once the handler reads, after the
	// proxy gave up waiting and sent the body (a slow upload
	// handler): the gateway's server had sent its own by then.
	{"late", func(_ http.ResponseWriter, sent <-chan struct{}) {
		select {
		case <-sent:
		case <-time.After(10 * time.Second):
		}
	}, 0},
	// Its handler sends 100 itself, Expect or not.
	{"unasked", func(w http.ResponseWriter, _ <-chan struct{}) { w.WriteHeader(http.StatusContinue) }, 0},
	// A 103 Early Hints before the body still reaches the client.
	{"early hints", func(w http.ResponseWriter, _ <-chan struct{}) {
		w.Header().Set("Link", "</app.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
	}, 1},
}

// TestExpectContinueOnce: an HTTP/1.1 upload with Expect: 100-continue
// gets exactly one 100 Continue before its final status, however its host
// answers the expectation (the gateway's server sends its own when the
// proxy starts reading the body; the host's would be a second), a host's
// 103 Early Hints still passes, and the host gets the whole body.
func TestExpectContinueOnce(t *testing.T) {
	for _, tc := range continueCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			host := &continueHost{before: tc.before, sent: make(chan struct{})}
			e.backend("h1", "hello", host)
			c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			head := "POST /upload HTTP/1.1\r\nHost: hello.apps.test\r\nExpect: 100-continue\r\nContent-Length: " +
				strconv.Itoa(len(uploadBody)) + "\r\n\r\n"
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			tp := textproto.NewReader(bufio.NewReader(c))
			continues, hints, status := 0, 0, 0
			for status == 0 {
				line, err := tp.ReadLine()
				if err != nil {
					t.Fatalf("after %d 100s: %v", continues, err)
				}
				if _, err := tp.ReadMIMEHeader(); err != nil {
					t.Fatalf("head of %q: %v", line, err)
				}
				switch {
				case strings.HasPrefix(line, "HTTP/1.1 100 "):
					if continues++; continues == 1 {
						if _, err := io.WriteString(c, uploadBody); err != nil {
							t.Fatal(err)
						}
						close(host.sent)
					}
				case strings.HasPrefix(line, "HTTP/1.1 103 "):
					hints++
				case strings.HasPrefix(line, "HTTP/1.1 1"):
					t.Fatalf("unexpected interim response %q", line)
				default:
					status, _ = strconv.Atoi(strings.Fields(line)[1])
				}
			}
			if continues != 1 || hints != tc.hints || status != http.StatusCreated {
				t.Fatalf("got %d 100 Continue, %d 103, final %d; want 1, %d, 201", continues, hints, status, tc.hints)
			}
			if got := host.bodies(); len(got) != 1 || got[0] != uploadBody {
				t.Fatalf("host read %q, want [%q]", got, uploadBody)
			}
		})
	}
}

// TestExpectContinueOnceH2: the same over gatehouse's HTTP/2 server, which
// answers a stream's expect: 100-continue itself at the first body read.
func TestExpectContinueOnceH2(t *testing.T) {
	for _, tc := range continueCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			host := &continueHost{before: tc.before, sent: make(chan struct{})}
			e.backend("h1", "hello", host)
			c := dialH2(t, e.gw)
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(c, c)
			_ = fr.WriteSettings()
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "hello.apps.test"}, {":path", "/upload"},
				{"expect", "100-continue"}, {"content-length", strconv.Itoa(len(uploadBody))}} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			status := ""
			dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
				if f.Name == ":status" {
					status = f.Value
				}
			})
			continues, hints := 0, 0
			for final := false; !final; {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("after %d 100s: %v", continues, err)
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						_ = fr.WriteSettingsAck()
					}
				case *http2.RSTStreamFrame:
					t.Fatalf("stream reset: %v", f.ErrCode)
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY: %v", f.ErrCode)
				case *http2.HeadersFrame:
					status = ""
					if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
						t.Fatal(err)
					}
					switch {
					case status == "100":
						if continues++; continues == 1 {
							if err := fr.WriteData(1, true, []byte(uploadBody)); err != nil {
								t.Fatal(err)
							}
							close(host.sent)
						}
					case status == "103":
						hints++
					case strings.HasPrefix(status, "1"):
						t.Fatalf("unexpected interim response %s", status)
					default:
						final = true
					}
				}
			}
			if continues != 1 || hints != tc.hints || status != "201" {
				t.Fatalf("got %d 100 Continue, %d 103, final %s; want 1, %d, 201", continues, hints, status, tc.hints)
			}
			if got := host.bodies(); len(got) != 1 || got[0] != uploadBody {
				t.Fatalf("host read %q, want [%q]", got, uploadBody)
			}
		})
	}
}

// dialH2 serves h over gatehouse's HTTP/2 server (prior knowledge, on one
// loopback connection) and returns the client's end. The test owns the
// server: it is closed, and its accept goroutine waited for, at cleanup.
func dialH2(t *testing.T, h http.Handler) net.Conn {
	t.Helper()
	srv, err := h2.New(h2.Options{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, err := ln.Accept(); err == nil {
			srv.ServeConn(c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		ln.Close()
		srv.Close()
		<-done
	})
	return c
}
