package gatehouse

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// parityEnv is a whole gatehouse with app "hello" (CORS for
// https://shop.example) and one host that answers by path.
type parityEnv struct {
	r *running
}

func newParityEnv(t *testing.T) *parityEnv {
	t.Helper()
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello",
		`{"mode":"http","cors":{"origins":["https://shop.example"]},"rate_limit":{"requests":1000,"window":"60s"}}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	startHost(t, r, "host-1", "hello", http.HandlerFunc(parityHost))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return len(r.g.Live().Load().Pool("hello")) == 1
	}, "host-1 never became routable")
	return &parityEnv{r: r}
}

// pause waits d, or less if r's connection ends first: the host's server
// closes at cleanup without waiting for its handlers, which would
// otherwise outlive the test (TestMain's goleak).
func pause(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// parityHost answers by path: /echo the headers it saw (as JSON), /hop
// with hop-by-hop fields, /trailer with a trailer, /early a 103 first.
func parityHost(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/hop":
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		io.WriteString(w, "hop")
	case "/trailer":
		w.Header().Set("Trailer", "X-T")
		io.WriteString(w, "body")
		w.Header().Set("X-T", "t1")
	case "/forged-trailers":
		// Trailers a host sends under names the gateway sets, or that
		// must never be trailers (RFC 9110 §6.5.1), announced in a
		// Trailer field (?announce; ?framing adds Content-Length to it)
		// or not (http.TrailerPrefix).
		q := r.URL.Query()
		names := forgedTrailers
		if q.Has("announce") {
			names = announcedTrailers
			decl := strings.Join(names, ", ") + ", X-Checksum"
			if q.Has("framing") {
				decl += ", Content-Length"
			}
			w.Header().Set("Trailer", decl)
		}
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		for _, k := range append(names, "X-Checksum") {
			v := "forged"
			if k == "X-Checksum" {
				v = "c1"
			}
			if !q.Has("announce") {
				k = http.TrailerPrefix + k
			}
			w.Header().Set(k, v)
		}
	case "/raw":
		// The answer is rawAnswers[?a], written as is on the hijacked
		// connection, which then closes.
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, rawAnswers[r.URL.Query().Get("a")])
	case "/early":
		w.Header().Set("Link", "</s.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "early")
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		pause(r, 2500*time.Millisecond)
		io.WriteString(w, "data: 2\n\n")
	case "/sse-len":
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "18")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		pause(r, 1500*time.Millisecond)
		io.WriteString(w, "data: 2\n")
	case "/nosniff":
		w.Header()["Content-Type"] = nil
		io.WriteString(w, "<html><body>hi</body></html>")
	case "/stream":
		io.WriteString(w, "part1 ")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part2")
	case "/304":
		w.Header().Set("Etag", `"x"`)
		w.WriteHeader(http.StatusNotModified)
	case "/204":
		w.WriteHeader(http.StatusNoContent)
	case "/big":
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, strings.Repeat("z", 100<<10))
	case "/headlen":
		w.Header().Set("Content-Length", "10")
	case "/close":
		w.Header().Set("Connection", "close")
		io.WriteString(w, "closing")
	case "/ws":
		if r.Header.Get("Upgrade") == "" {
			http.Error(w, "no upgrade", 400)
			return
		}
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "test")
		w.Header().Set("X-Host-Saw-Gh", r.Header.Get("X-Gatehouse-App-Id")+"|"+r.Header.Get("X-Gatehouse-Subject")+"|"+r.Header.Get("X-Forwarded-Proto"))
		w.WriteHeader(http.StatusSwitchingProtocols)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.Flush()
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo:"+line)
	case "/error":
		http.Error(w, "host error", http.StatusTeapot)
	default:
		h := r.Header.Clone()
		for _, k := range []string{"X-Request-Id", "X-Gatehouse-Request-Id"} {
			if h.Get(k) != "" && !strings.HasPrefix(h.Get(k), "client-") {
				h.Set(k, "(generated)")
			}
		}
		h.Set("X-Host-Body", string(b))
		h.Set("X-Host-Uri", r.RequestURI)
		h.Set("X-Host-Trailer", fmt.Sprint(r.Trailer))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h)
	}
}

type parityReq struct {
	name, method, host, target string
	hdr                        [][2]string
	body                       string
	chunked                    bool
}

type parityRes struct {
	Interim []int
	Status  int
	Header  http.Header
	Trailer http.Header
	Body    string
}

// The three ways a request reaches the L7 handler on the https listener.
const (
	viaLane = "lane"
	viaH1   = "net/http h1"
	viaH2   = "h2"
)

// dial opens a TLS connection to the https listener negotiating proto. t
// nil (from a transport's dialer): failures panic, which the test reports.
func (p *parityEnv) dial(t *testing.T, proto string) *tls.Conn {
	fail := func(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
	if t != nil {
		t.Helper()
		fail = t.Fatalf
	}
	c, err := tls.Dial("tcp", p.r.g.Addrs().HTTPS, &tls.Config{ServerName: "hello.test.local", InsecureSkipVerify: true, NextProtos: []string{proto}})
	if err != nil {
		fail("dial: %v", err)
	}
	if got := c.ConnectionState().NegotiatedProtocol; got != proto && !(proto == "http/1.1" && got == "") {
		fail("ALPN %q, want %q", got, proto)
	}
	return c
}

// h2 is an HTTP/2 client of the https listener that adds nothing of its
// own (no Accept-Encoding; requests carry their own User-Agent).
func (p *parityEnv) h2() *http.Transport {
	tr := &http.Transport{DisableCompression: true, DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
		return p.dial(nil, "h2"), nil
	}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true) // HTTP/2 only: the dial negotiates h2 by ALPN
	return tr
}

func rawReq(q parityReq) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: parity/1\r\n", q.method, q.target, q.host)
	for _, kv := range q.hdr {
		fmt.Fprintf(&sb, "%s: %s\r\n", kv[0], kv[1])
	}
	switch {
	case q.chunked:
		sb.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if q.body != "" {
			fmt.Fprintf(&sb, "%x\r\n%s\r\n", len(q.body), q.body)
		}
		sb.WriteString("0\r\n\r\n")
	case q.body != "":
		fmt.Fprintf(&sb, "Content-Length: %d\r\n\r\n%s", len(q.body), q.body)
	default:
		sb.WriteString("\r\n")
	}
	return sb.String()
}

// readRaw reads one answer (1xx first) to method from br.
func readRaw(t *testing.T, br *bufio.Reader, method string) parityRes {
	t.Helper()
	var out parityRes
	for {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if res.StatusCode < 200 && res.StatusCode != 101 {
			out.Interim = append(out.Interim, res.StatusCode)
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		out.Status, out.Header, out.Trailer, out.Body = res.StatusCode, res.Header, res.Trailer, string(b)
		return out
	}
}

// send sends q over the path via and returns the answer.
func (p *parityEnv) send(t *testing.T, via string, q parityReq) parityRes {
	t.Helper()
	if q.method == "" {
		q.method = "GET"
	}
	if q.host == "" {
		q.host = "hello.test.local"
	}
	switch via {
	case viaLane, viaH1:
		c := p.dial(t, "http/1.1")
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if via == viaH1 {
			// A chunked request hands the connection to net/http,
			// which then serves q.
			io.WriteString(c, rawReq(parityReq{method: "POST", host: "hello.test.local", target: "/handoff", chunked: true, body: "x"}))
			if res := readRaw(t, br, "POST"); res.Status != 200 {
				t.Fatalf("handoff request: %+v", res)
			}
		}
		go io.WriteString(c, rawReq(q))
		return readRaw(t, br, q.method)
	}
	tr := p.h2()
	defer tr.CloseIdleConnections()
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	req, err := http.NewRequest(q.method, "https://"+q.host+q.target, body)
	if err != nil {
		t.Fatal(err)
	}
	if q.chunked {
		req.ContentLength = -1
	}
	req.Header.Set("User-Agent", "parity/1")
	for _, kv := range q.hdr {
		req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
	}
	var out parityRes
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { out.Interim = append(out.Interim, code); return nil },
	})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := tr.RoundTrip(req.WithContext(ctx))
	if err != nil {
		out.Status, out.Body = -1, err.Error()
		return out
	}
	if res.ProtoMajor != 2 {
		t.Fatalf("the HTTP/2 path answered over %s", res.Proto)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	out.Status, out.Header, out.Trailer, out.Body = res.StatusCode, res.Header, res.Trailer, string(b)
	return out
}

// normalize hides what differs per request (ids, times, counters).
func (r *parityRes) normalize() {
	for _, k := range []string{"Date"} {
		r.Header.Del(k)
	}
	for _, k := range []string{"X-Request-Id", "X-Ratelimit-Reset", "X-Ratelimit-Remaining", "Ratelimit"} {
		if v := r.Header.Get(k); v != "" && !strings.HasPrefix(v, "client-") {
			r.Header.Set(k, "(present)")
		}
	}
	if len(r.Trailer) == 0 {
		r.Trailer = nil
	}
	if strings.HasPrefix(r.Body, "{") && strings.Contains(r.Body, `"X-Host-Body"`) {
		var h http.Header
		if json.Unmarshal([]byte(r.Body), &h) == nil {
			keys := make([]string, 0, len(h))
			for k := range h {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var sb strings.Builder
			for _, k := range keys {
				fmt.Fprintf(&sb, "%s=%q ", k, h[k])
			}
			r.Body = "host saw: " + sb.String()
		}
	}
}

var parityPaths = []string{viaLane, viaH1, viaH2}

// untypedBody: the host sent no type, and none is made up (sniffed) on
// the way.
func untypedBody(t *testing.T, r parityRes) {
	if ct, ok := r.Header["Content-Type"]; ok {
		t.Errorf("Content-Type %q on a body the host sent untyped", ct)
	}
}

// TestParityAcrossPaths sends the same requests through the lane, net/http
// HTTP/1.1 (a connection the lane handed over) and HTTP/2 to a whole
// gatehouse, and asserts that the client and the host observe the same
// thing on all three (DESIGN §2: stripping, X-Forwarded-*, context headers,
// request id, rate-limit and CORS headers, problem+json errors, HEAD, 1xx,
// trailers, hop-by-hop fields, 414), plus the answer each case wants.
func TestParityAcrossPaths(t *testing.T) {
	p := newParityEnv(t)
	long := "/" + strings.Repeat("a", 9<<10)
	cases := []struct {
		parityReq
		status  int
		problem bool
		check   func(t *testing.T, r parityRes)
	}{
		{parityReq: parityReq{name: "spoofed and forwarded fields", target: "/echo", hdr: [][2]string{
			{"X-Gatehouse-App-Id", "evil"}, {"X_Gatehouse_Subject", "root"}, {"x-gatehouse-cluster", "other"},
			{"X-Forwarded-For", "203.0.113.9"}, {"Forwarded", "for=203.0.113.9"}, {"X-Forwarded-Host", "evil.example"},
			{"X_Forwarded_Proto", "http"}, {"X-Gatehouse-Forwarded", "two"}, {"X-Request-Id", "client-abc"}}},
			status: 200, check: func(t *testing.T, r parityRes) {
				for _, want := range []string{`"X-Gatehouse-App-Id":["hello"]`, `"X-Gatehouse-Cluster":["one"]`, `"X-Forwarded-For":["127.0.0.1"]`,
					`"X-Forwarded-Host":["hello.test.local"]`, `"X-Forwarded-Proto":["https"]`, `"X-Request-Id":["client-abc"]`, `"X-Gatehouse-Request-Id":["client-abc"]`} {
					if !strings.Contains(r.Body, want) {
						t.Errorf("the host did not see %s: %s", want, r.Body)
					}
				}
				for _, bad := range []string{"evil", "root", "other", "203.0.113", "X_", `"Forwarded"`, "X-Gatehouse-Forwarded", "X-Gatehouse-Subject"} {
					if strings.Contains(r.Body, bad) {
						t.Errorf("the host saw %q: %s", bad, r.Body)
					}
				}
			}},
		{parityReq: parityReq{name: "allowed origin", target: "/echo", hdr: [][2]string{{"Origin", "https://shop.example"}}}, status: 200,
			check: func(t *testing.T, r parityRes) {
				if r.Header.Get("Access-Control-Allow-Origin") != "https://shop.example" || r.Header.Get("Vary") != "Origin" {
					t.Errorf("CORS fields: %v", r.Header)
				}
			}},
		{parityReq: parityReq{name: "other origin", target: "/echo", hdr: [][2]string{{"Origin", "https://evil.example"}}}, status: 200,
			check: func(t *testing.T, r parityRes) {
				if r.Header.Get("Access-Control-Allow-Origin") != "" {
					t.Errorf("CORS fields: %v", r.Header)
				}
			}},
		{parityReq: parityReq{name: "preflight", method: "OPTIONS", target: "/echo", hdr: [][2]string{{"Origin", "https://shop.example"}, {"Access-Control-Request-Method", "PUT"}}}, status: 204,
			check: func(t *testing.T, r parityRes) {
				if r.Header.Get("Access-Control-Max-Age") != "600" {
					t.Errorf("preflight: %v", r.Header)
				}
			}},
		{parityReq: parityReq{name: "preflight other origin", method: "OPTIONS", target: "/echo", hdr: [][2]string{{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "PUT"}}}, status: 403, problem: true},
		{parityReq: parityReq{name: "HEAD", method: "HEAD", target: "/echo"}, status: 200},
		{parityReq: parityReq{name: "POST with a length", method: "POST", target: "/echo", body: "hello"}, status: 200},
		{parityReq: parityReq{name: "chunked PUT", method: "PUT", target: "/echo", body: "chunky", chunked: true}, status: 200},
		{parityReq: parityReq{name: "hop-by-hop request fields", method: "POST", target: "/echo", body: "abc", hdr: [][2]string{{"Keep-Alive", "timeout=5"}, {"Proxy-Authorization", "Basic eA=="}}}, status: 200,
			check: func(t *testing.T, r parityRes) {
				if strings.Contains(r.Body, "Keep-Alive") || strings.Contains(r.Body, "Proxy-Authorization") {
					t.Errorf("hop-by-hop fields reached the host: %s", r.Body)
				}
			}},
		{parityReq: parityReq{name: "hop-by-hop response fields", target: "/hop"}, status: 200,
			check: func(t *testing.T, r parityRes) {
				if r.Header.Get("X-Hop") != "" || r.Header.Get("Keep-Alive") != "" {
					t.Errorf("hop-by-hop fields reached the client: %v", r.Header)
				}
			}},
		{parityReq: parityReq{name: "trailers", target: "/trailer", hdr: [][2]string{{"Te", "trailers"}}}, status: 200,
			check: func(t *testing.T, r parityRes) {
				if r.Trailer.Get("X-T") != "t1" {
					t.Errorf("trailer: %v", r.Trailer)
				}
			}},
		{parityReq: parityReq{name: "103 early hints", target: "/early"}, status: 200,
			check: func(t *testing.T, r parityRes) {
				if len(r.Interim) != 1 || r.Interim[0] != 103 || r.Header.Get("X-Ratelimit-Limit") != "1000" {
					t.Errorf("1xx %v, final %v", r.Interim, r.Header)
				}
			}},
		{parityReq: parityReq{name: "host error", target: "/error"}, status: 418},
		{parityReq: parityReq{name: "304", target: "/304"}, status: 304},
		{parityReq: parityReq{name: "204", target: "/204"}, status: 204},
		// The host sent no type: none is made up (sniffed) on the way.
		{parityReq: parityReq{name: "unsniffed body", target: "/nosniff"}, status: 200, check: untypedBody},
		{parityReq: parityReq{name: "unsniffed body of a POST", method: "POST", target: "/nosniff", body: "x"}, status: 200, check: untypedBody},
		{parityReq: parityReq{name: "streamed body", target: "/stream"}, status: 200},
		{parityReq: parityReq{name: "HEAD of a streamed body", method: "HEAD", target: "/stream"}, status: 200},
		{parityReq: parityReq{name: "large body", target: "/big"}, status: 200},
		{parityReq: parityReq{name: "unknown host", host: "nope.test.local", target: "/"}, status: 404, problem: true},
		{parityReq: parityReq{name: "healthz", target: "/healthz"}, status: 200},
		{parityReq: parityReq{name: "request line over 8 KiB", target: long}, status: 414, problem: true},
		{parityReq: parityReq{name: "public API", host: "api.test.local", target: "/api/v3/discovery/clusters"}, status: 200},
		{parityReq: parityReq{name: "control API without credential", host: "api.test.local", target: "/api/v3/apps"}, status: 401, problem: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res [3]parityRes
			for i, via := range parityPaths {
				res[i] = p.send(t, via, tc.parityReq)
				if res[i].Status != tc.status {
					t.Fatalf("via %s: status %d, want %d: %s", via, res[i].Status, tc.status, res[i].Body)
				}
				if tc.problem && res[i].Header.Get("Content-Type") != problem.ContentType {
					t.Errorf("via %s: Content-Type %q, want problem+json", via, res[i].Header.Get("Content-Type"))
				}
				if tc.check != nil {
					tc.check(t, res[i])
				}
				res[i].normalize()
			}
			for i := 1; i < len(parityPaths); i++ {
				if !reflect.DeepEqual(res[0], res[i]) {
					t.Errorf("%s and %s differ:\n%s: %+v\n%s: %+v", parityPaths[0], parityPaths[i], parityPaths[0], res[0], parityPaths[i], res[i])
				}
			}
		})
	}
}

// TestParitySSE: a text/event-stream answer is flushed at once on each
// path (DESIGN §2 step 10); the host waits 1.5 s before its second event.
func TestParitySSE(t *testing.T) {
	p := newParityEnv(t)
	for _, via := range parityPaths {
		var body io.Reader
		start := time.Now()
		if via == viaH2 {
			tr := p.h2()
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest("GET", "https://hello.test.local/sse", nil)
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ProtoMajor != 2 {
				t.Fatalf("the HTTP/2 path answered over %s", res.Proto)
			}
			defer res.Body.Close()
			body = res.Body
		} else {
			c := p.dial(t, "http/1.1")
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			if via == viaH1 {
				io.WriteString(c, rawReq(parityReq{method: "POST", host: "hello.test.local", target: "/handoff", chunked: true, body: "x"}))
				readRaw(t, br, "POST")
			}
			start = time.Now()
			io.WriteString(c, rawReq(parityReq{method: "GET", host: "hello.test.local", target: "/sse"}))
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body = res.Body
		}
		buf := make([]byte, len("data: 1\n\n"))
		if _, err := io.ReadFull(body, buf); err != nil || string(buf) != "data: 1\n\n" {
			t.Fatalf("via %s: first event %q, %v", via, buf, err)
		}
		// The host sends its second event 2.5 s after the first: an
		// answer held back until then (or until the handler returns)
		// takes longer than this bound, which also covers a TLS dial.
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("via %s: the first event took %v: held back", via, d)
		}
	}
}

// TestParityRawHTTP1 sends odd but valid (or refused) HTTP/1.1 requests on
// a fresh connection (the lane) and on one the lane handed to net/http, and
// asserts the same answer, each followed by a GET on the same connection
// (a HEAD's answer must leave nothing behind), or by the connection's end
// after a refusal.
func TestParityRawHTTP1(t *testing.T) {
	p := newParityEnv(t)
	const H = "Host: hello.test.local\r\n"
	type refusal struct {
		status int
		detail string
	}
	// Refused framings get the guard's 400 problem naming the reason on
	// both paths, and the heads net/http refuses itself (the lane hands
	// them to it) a problem with net/http's status and reason.
	malformed := refusal{400, "the request head is malformed"}
	refused := map[string]refusal{
		"POST /echo HTTP/1.1\r\n" + H + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": {400, "both Content-Length and Transfer-Encoding"},
		"POST /echo HTTP/1.1\r\n" + H + "Content-Length : 3\r\n\r\nabc":                                    {400, "whitespace between a header field name and its colon"},
		"GET /echo HTTP/1.1\r\nHost: hello.test.local bad\r\n\r\n":                                         {400, "malformed Host header"},
		"GET /echo HTTP/1.1\r\nUser-Agent: parity/1\r\n\r\n":                                               {400, "missing required Host header"},
		"GET /echo HTTP/1.1\r\n" + H + "X(A: 1\r\n\r\n":                                                    malformed,
		"GET /echo HTTP/1.1\r\n" + H + "X-A: a\x01b\r\n\r\n":                                               malformed,
		"GET /echo HTTP/1.1\r\n" + H + "NoColon\r\n\r\n":                                                   malformed,
		"GET /echo HTTP/2.0\r\n" + H + "\r\n":                                                              {505, "unsupported protocol version"},
		"GET /echo HTTP/1.1\r\n" + H + "Expect: foo\r\n\r\n":                                               {417, "the Expect field names an expectation other than 100-continue"},
		"GET /echo HTTP/1.1\r\n" + H + "X-Big: " + strings.Repeat("b", 76<<10) + "\r\n\r\n":                {431, "the request head is over the listener's limit"},
	}
	reqs := []string{
		"GET /echo HTTP/1.1\r\n" + H + "X-A: a\r\n b\r\n\r\n",
		"POST /echo HTTP/1.1\r\n" + H + "Content-Length: 03\r\n\r\nabc",
		"GET /echo HTTP/1.1\r\n" + H + "X-A: a \t\r\n\r\n",
		"GET /echo HTTP/1.1\nHost: hello.test.local\n\n",
		"GET /echo HTTP/1.1\r\nHost: HELLO.test.local.\r\n\r\n",
		"GET /echo HTTP/1.1\r\n" + H + "X-Request-Id: a\r\nX-Request-Id: b\r\n\r\n",
		"GET /echo HTTP/1.1\r\n" + H + "Connection: keep-alive, close\r\n\r\n",
		"GET /echo HTTP/1.1\r\n" + H + "Traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
		"GET /echo?a=%zz&b=1;c=2 HTTP/1.1\r\n" + H + "\r\n",
		"HEAD / HTTP/1.1\r\nHost: nope.test.local\r\n\r\n",
		"HEAD /api/v3/apps HTTP/1.1\r\nHost: api.test.local\r\n\r\n",
		"HEAD /trailer HTTP/1.1\r\n" + H + "\r\n",
		"HEAD /big HTTP/1.1\r\n" + H + "\r\n",
	}
	for req := range refused {
		reqs = append(reqs, req)
	}
	for _, req := range reqs {
		var out [2]string
		for i, via := range []string{viaLane, viaH1} {
			c := p.dial(t, "http/1.1")
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			if via == viaH1 {
				io.WriteString(c, rawReq(parityReq{method: "POST", host: "hello.test.local", target: "/handoff", chunked: true, body: "x"}))
				readRaw(t, br, "POST")
			}
			method, _, _ := strings.Cut(req, " ")
			want, isRefused := refused[req]
			closing := isRefused || strings.Contains(req, "close")
			send := req
			if !closing {
				send += rawReq(parityReq{method: "GET", host: "hello.test.local", target: "/healthz"})
			}
			go io.WriteString(c, send)
			r := readRaw(t, br, method)
			r.normalize()
			out[i] = fmt.Sprintf("%d %v %s", r.Status, r.Header, r.Body)
			if isRefused {
				if r.Status != want.status || r.Header.Get("Content-Type") != problem.ContentType || !strings.Contains(r.Body, `"detail":"`+want.detail+`"`) {
					t.Errorf("via %s: %.100q answered %s, want a %d problem %q", via, req, out[i], want.status, want.detail)
				}
			}
			if closing {
				if _, err := br.ReadByte(); err != io.EOF {
					out[i] += fmt.Sprintf(" | not closed: %v", err)
				}
			} else {
				next := readRaw(t, br, "GET")
				out[i] += fmt.Sprintf(" | next: %d %s", next.Status, next.Body)
			}
			c.Close()
		}
		if out[0] != out[1] {
			t.Errorf("%.200q:\nlane:     %s\nnet/http: %s", req, out[0], out[1])
		}
	}
}
