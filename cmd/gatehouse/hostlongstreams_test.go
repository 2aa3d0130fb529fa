package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
)

// TestSidecarBoundsCutNoLongExchange: the sidecar's head, idle and stall
// bounds (sidecarTimeouts) cut no exchange that is under way: an upload
// that trickles for longer than all three, over HTTP/1.1 and over h2c,
// its bytes coming within the stall bound, and an answer that streams as
// long (over h2c its stream open, the connection is not idle), after
// which the same h2c connection serves another request.
func TestSidecarBoundsCutNoLongExchange(t *testing.T) {
	const bound = 300 * time.Millisecond
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow": // 10 parts over 4 bounds
			for i := range 10 {
				_, _ = io.WriteString(w, strconv.Itoa(i))
				w.(http.Flusher).Flush()
				time.Sleep(bound * 4 / 10)
			}
		case "/count":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, strconv.FormatInt(n, 10))
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
	for _, scheme := range []string{host.SchemeHTTP, host.SchemeH2C} {
		t.Run(scheme, func(t *testing.T) {
			app := httptest.NewUnstartedServer(handler)
			app.Config.Protocols = new(http.Protocols)
			app.Config.Protocols.SetHTTP1(true)
			app.Config.Protocols.SetUnencryptedHTTP2(true)
			app.Start()
			t.Cleanup(app.Close)
			up, err := url.Parse(app.URL)
			if err != nil {
				t.Fatal(err)
			}
			// The stall bound at two: the gaps (0.4 bound) then have a wide
			// margin on a loaded machine, and the exchanges (4 bounds) still
			// outlast it.
			tm := sidecarTimeouts{readHeader: bound, idle: bound, stall: 2 * bound}
			addr := runSidecar(t, sidecarProxy(up, scheme, slog.New(slog.DiscardHandler)), scheme, tm)

			tr := &http.Transport{Protocols: new(http.Protocols)}
			if scheme == host.SchemeH2C {
				tr.Protocols.SetUnencryptedHTTP2(true)
			} else {
				tr.Protocols.SetHTTP1(true)
			}
			t.Cleanup(tr.CloseIdleConnections)
			cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			base := "http://" + addr
			do := func(req *http.Request, want string) {
				t.Helper()
				res, err := cl.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				if err != nil || res.StatusCode != 200 || string(b) != want {
					t.Fatalf("%s %s: %d %q %v, want 200 %q", req.Method, req.URL.Path, res.StatusCode, b, err, want)
				}
			}

			// An upload of 10 parts over 4 bounds.
			pr, pw := io.Pipe()
			go func() {
				for range 10 {
					time.Sleep(bound * 4 / 10)
					if _, err := io.WriteString(pw, "0123456789"); err != nil {
						return
					}
				}
				pw.Close()
			}()
			req, err := http.NewRequest(http.MethodPost, base+"/count", pr)
			if err != nil {
				t.Fatal(err)
			}
			do(req, "100")

			// An answer of 10 parts over 4 bounds; over h2c, another
			// request sent 2 bounds into it takes the same connection:
			// the open stream kept the idle bound from sending GOAWAY.
			var conns []string
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				conns = append(conns, i.Conn.LocalAddr().String())
			}}
			get, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, base+"/slow", nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := cl.Do(get)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			first := make([]byte, 1)
			if _, err := io.ReadFull(res.Body, first); err != nil {
				t.Fatal(err)
			}
			if scheme == host.SchemeH2C {
				time.Sleep(2 * bound) // into the stream, past the idle bound
				again, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, base+"/", nil)
				if err != nil {
					t.Fatal(err)
				}
				do(again, "ok")
			}
			rest, err := io.ReadAll(res.Body)
			if got := string(first) + string(rest); err != nil || res.StatusCode != 200 || got != "0123456789" {
				t.Fatalf("GET /slow: %d %q %v, want 200 %q", res.StatusCode, got, err, "0123456789")
			}
			if scheme == host.SchemeH2C && (len(conns) != 2 || conns[0] != conns[1]) {
				t.Errorf("h2c connections used %v, want one: the idle bound closed a connection with a stream open", conns)
			}
		})
	}
}
