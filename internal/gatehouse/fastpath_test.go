package gatehouse

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestFastPathSameAsNetHTTP runs one sequence of requests on one
// keep-alive connection through two whole gatehouses, listeners.fast_path on
// and off, and asserts that clients and hosts see the same thing: status,
// headers and body to the client, every header and the body to the host
// (values generated per request, ids and times, compared by presence).
// The sequence ends with a chunked PUT, which the fast path hands over to
// net/http, and a GET on the connection net/http then keeps.
func TestFastPathSameAsNetHTTP(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	type result struct {
		Status int
		Header http.Header
		Body   string
	}
	run := func(fast bool) []result {
		cfg := testConfig(t)
		cfg.Listeners.FastPath = fast
		r := start(t, cfg)
		if code, body := r.control(t, "PUT", "/api/v3/apps/hello",
			`{"mode":"http","cors":{"origins":["https://shop.example"]},"rate_limit":{"requests":1000,"window":"60s"}}`); code != 200 {
			t.Fatalf("put app: %d %s", code, body)
		}
		// The host answers with every header it received, as JSON.
		startHost(t, r, "host-1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			h := req.Header.Clone()
			for _, k := range []string{"X-Request-Id", "X-Gatehouse-Request-Id"} {
				if h.Get(k) != "" && !strings.HasPrefix(h.Get(k), "client-") {
					h.Set(k, "(generated)")
				}
			}
			b, _ := io.ReadAll(req.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Host-Saw", req.Method+" "+req.RequestURI+" "+req.Host+" body="+string(b))
			_ = json.NewEncoder(w).Encode(h)
		}))
		testutil.WaitFor(t, 5*time.Second, func() bool {
			return len(r.g.Live().Load().Pool("hello")) == 1
		}, "host-1 never became routable")

		c, err := net.Dial("tcp", r.g.Addrs().HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var out []result
		for _, raw := range fastPathRequests {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, raw); err != nil {
				t.Fatal(err)
			}
			method, _, _ := strings.Cut(raw, " ")
			res, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("fast_path=%v: reading the answer to %q: %v", fast, raw, err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			h := res.Header
			h.Del("Date")
			for _, k := range []string{"X-Request-Id", "X-Ratelimit-Reset", "Ratelimit"} {
				if v := h.Get(k); v != "" && !strings.HasPrefix(v, "client-") {
					h.Set(k, "(present)")
				}
			}
			out = append(out, result{res.StatusCode, h, string(b)})
		}
		// The chunked PUT handed the connection over, and the metric says
		// why; with the fast path off nothing is handed over.
		mresp, err := http.Get("http://" + r.g.Addrs().Management + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		mb, _ := io.ReadAll(mresp.Body)
		mresp.Body.Close()
		const line = `gatehouse_fast_path_handoffs_total{reason="framing"} 1`
		if got := strings.Contains(string(mb), line); got != fast {
			t.Errorf("fast_path=%v: /metrics has %q: %v", fast, line, got)
		}
		return out
	}
	slow, fast := run(false), run(true)
	for i := range fastPathRequests {
		if !reflect.DeepEqual(fast[i], slow[i]) {
			t.Errorf("request %q:\nfast path: %+v\nnet/http:  %+v", fastPathRequests[i], fast[i], slow[i])
		}
	}
	if slow[0].Status != 200 || !strings.Contains(slow[0].Body, `"X-Gatehouse-App-Id":["hello"]`) {
		t.Fatalf("the first request did not reach the host: %+v", slow[0])
	}
}

var fastPathRequests = func() []string {
	get := func(host, target string, extra ...string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, host, strings.Join(extra, ""))
	}
	app := "hello.test.local"
	return slices.Concat([]string{
		get(app, "/x"),
		"HEAD /x HTTP/1.1\r\nHost: " + app + "\r\n\r\n",
		get(app, "/a%20b/c?q=1&r=%41", "User-Agent: t/1\r\nAccept: */*\r\n"),
		get(app, "/", "X-Gatehouse-App-Id: evil\r\nX_Gatehouse_Subject: root\r\nx-gatehouse-cluster: other\r\n"),
		get(app, "/", "X-Forwarded-For: 203.0.113.9\r\nForwarded: for=203.0.113.9\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.example\r\n"),
		get(app, "/", "X-Request-Id: client-abc\r\n"),
		get(app, "/", "X-Request-Id: "+strings.Repeat("x", 200)+"\r\n"),
		get(app, "/", "Origin: https://shop.example\r\n"),
		get(app, "/", "Origin: https://evil.example\r\n"),
		get(app, "/", "Cookie: a=1\r\nCookie: b=2\r\nX-Multi: 1\r\nx-multi: 2\r\n"),
		get("HELLO.test.local:80", "/port"),
		get("nope.test.local", "/"),
		get(app, "/healthz"),
		get("api.test.local", "/api/v3/apps"),
		"OPTIONS / HTTP/1.1\r\nHost: " + app + "\r\nOrigin: https://shop.example\r\nAccess-Control-Request-Method: GET\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: " + app + "\r\nContent-Length: 4\r\n\r\nbody",
		"DELETE /d HTTP/1.1\r\nHost: " + app + "\r\n\r\n",
		"PUT /chunked HTTP/1.1\r\nHost: " + app + "\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
		get(app, "/after-handover"),
	})
}()
