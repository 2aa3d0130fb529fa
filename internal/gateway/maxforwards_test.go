package gateway

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// forwardsSeen records what a host received: each request's method and
// its Max-Forwards fields as they arrived ("-" when it had none).
type forwardsSeen struct {
	mu   sync.Mutex
	seen []string
}

func (s *forwardsSeen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mf := "-"
		if v, ok := r.Header["Max-Forwards"]; ok {
			mf = strings.Join(v, "|")
		}
		s.mu.Lock()
		s.seen = append(s.seen, r.Method+" "+mf)
		s.mu.Unlock()
		_, _ = io.WriteString(w, "host answered "+r.Method)
	})
}

// take returns what the host received since the last call.
func (s *forwardsSeen) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.seen
	s.seen = nil
	return got
}

// TestOptionsMaxForwards: the gateway is an intermediary, so an OPTIONS
// with Max-Forwards is checked and updated before it goes on (RFC 9110
// §7.6.2): 0 is answered by the gateway as the final recipient, as
// "OPTIONS *" is (200, Allow, no body), and the host gets nothing; N is
// forwarded as N-1; a value that is not a decimal, or fields that
// disagree, get a 400 problem and reach no host. Other methods, and an
// OPTIONS without the field, reach the host as sent. Through net/http's
// server and the lane alike.
func TestOptionsMaxForwards(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var host forwardsSeen
	e.backend("h1", "hello", host.handler())
	httpAddr, _ := e.serve(false)
	cl := &http.Client{}
	t.Cleanup(cl.CloseIdleConnections)
	for _, srv := range []struct{ name, url string }{{"net/http", e.srv.URL}, {"lane", "http://" + httpAddr}} {
		do := func(method string, mf ...string) (*http.Response, string) {
			t.Helper()
			req, err := http.NewRequest(method, srv.url+"/x", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "hello." + testZone
			if mf != nil {
				req.Header["Max-Forwards"] = mf
			}
			res, err := cl.Do(req)
			if err != nil {
				t.Fatalf("%s: %s %q: %v", srv.name, method, mf, err)
			}
			defer res.Body.Close()
			return res, readBody(t, res)
		}

		res, body := do("OPTIONS", "0")
		if res.StatusCode != http.StatusOK || res.Header.Get("Allow") != "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS" ||
			res.Header.Get("Content-Length") != "0" || body != "" || res.Header.Get("X-Gatehouse-Cluster") != "c1" {
			t.Fatalf("%s: OPTIONS with Max-Forwards 0: %d %v %q, want the gateway's own 200 with Allow and no body", srv.name, res.StatusCode, res.Header, body)
		}
		if got := host.take(); len(got) != 0 {
			t.Fatalf("%s: OPTIONS with Max-Forwards 0 reached the host: %q", srv.name, got)
		}

		for _, tc := range []struct {
			mf   []string
			want string
		}{
			{[]string{"1"}, "0"},
			{[]string{"5"}, "4"},
			{[]string{"10"}, "9"},
			{[]string{"007"}, "6"},
			{[]string{"3", "3"}, "2"},
			{[]string{"99999999999999999999"}, "99999999999999999998"},
		} {
			res, body := do("OPTIONS", tc.mf...)
			if res.StatusCode != http.StatusOK || body != "host answered OPTIONS" {
				t.Fatalf("%s: OPTIONS with Max-Forwards %q: %d %q, want the host's answer", srv.name, tc.mf, res.StatusCode, body)
			}
			if got, want := host.take(), []string{"OPTIONS " + tc.want}; !slices.Equal(got, want) {
				t.Fatalf("%s: OPTIONS with Max-Forwards %q: the host got %q, want %q", srv.name, tc.mf, got, want)
			}
		}

		for _, mf := range [][]string{{"abc"}, {"-1"}, {"+1"}, {"1.0"}, {"0x1"}, {""}, {"1, 1"}, {"1", "2"}, {"0", "1"}} {
			res, body := do("OPTIONS", mf...)
			wantProblemAnswer(t, srv.name+" OPTIONS with Max-Forwards "+strings.Join(mf, "|"), answer{res.StatusCode, res.Header, body}, http.StatusBadRequest, "Max-Forwards")
			if got := host.take(); len(got) != 0 {
				t.Fatalf("%s: OPTIONS with Max-Forwards %q reached the host: %q", srv.name, mf, got)
			}
		}

		if res, body := do("OPTIONS"); res.StatusCode != http.StatusOK || body != "host answered OPTIONS" {
			t.Fatalf("%s: OPTIONS without Max-Forwards: %d %q", srv.name, res.StatusCode, body)
		}
		for _, m := range []string{"GET", "POST", "DELETE", "PROPFIND"} {
			for _, mf := range []string{"0", "5", "abc"} {
				if res, body := do(m, mf); res.StatusCode != http.StatusOK || body != "host answered "+m {
					t.Fatalf("%s: %s with Max-Forwards %q: %d %q, want the host's answer", srv.name, m, mf, res.StatusCode, body)
				}
			}
		}
		want := []string{"OPTIONS -"}
		for _, m := range []string{"GET", "POST", "DELETE", "PROPFIND"} {
			want = append(want, m+" 0", m+" 5", m+" abc")
		}
		if got := host.take(); !slices.Equal(got, want) {
			t.Fatalf("%s: the host got %q, want %q", srv.name, got, want)
		}
	}
}

// TestOptionsMaxForwardsH2: over HTTP/2 too, an OPTIONS with
// Max-Forwards 0 is the gateway's to answer and one with 2 reaches the
// host with 1.
func TestOptionsMaxForwardsH2(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var host forwardsSeen
	e.backend("h1", "hello", host.handler())
	_, httpsAddr := e.serve(false)
	a := h2Answer(t, httpsAddr, "OPTIONS", "", [2]string{"max-forwards", "0"})
	if a.status != http.StatusOK || a.header.Get("Allow") != "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS" || a.body != "" {
		t.Fatalf("h2 OPTIONS with Max-Forwards 0: %d %v %q, want the gateway's own 200 with Allow", a.status, a.header, a.body)
	}
	a = h2Answer(t, httpsAddr, "OPTIONS", "", [2]string{"max-forwards", "2"})
	if a.status != http.StatusOK || a.body != "host answered OPTIONS" {
		t.Fatalf("h2 OPTIONS with Max-Forwards 2: %d %q", a.status, a.body)
	}
	a = h2Answer(t, httpsAddr, "OPTIONS", "", [2]string{"max-forwards", "2"}, [2]string{"max-forwards", "3"})
	wantProblemAnswer(t, "h2 OPTIONS with Max-Forwards 2 and 3", a, http.StatusBadRequest, "Max-Forwards")
	if got, want := host.take(), []string{"OPTIONS 1"}; !slices.Equal(got, want) {
		t.Fatalf("the host got %q, want %q", got, want)
	}
}

// TestOptionsMaxForwardsPreflight: a CORS preflight is answered by step 5
// whatever its Max-Forwards, since the gateway answers every preflight
// itself (it is the final recipient of each): with 0 an allowed origin
// still gets its 204 and another origin its 403, not the server's 200,
// which a browser would refuse as a preflight. An actual OPTIONS
// with Max-Forwards 0, and a refused value, carry the app's CORS fields,
// as the method refusals before step 5 do, so a page on an allowed
// origin reads them.
func TestOptionsMaxForwardsPreflight(t *testing.T) {
	t.Parallel()
	const allowed, other = "https://a.example", "https://b.example"
	e := newEnv(t, nil)
	e.b.Replace(route.State{
		Zones: []*route.Zone{{Name: testZone}},
		Apps:  []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive, CORS: route.CORS{Origins: []string{allowed}}}},
	})
	var host forwardsSeen
	e.backend("h1", "hello", host.handler())
	do := func(hdr http.Header) (*http.Response, string) {
		res := e.do("OPTIONS", "hello."+testZone, "/x", hdr, nil)
		return res, readBody(t, res)
	}
	for _, mf := range []string{"0", "abc"} {
		res, body := do(http.Header{"Origin": {allowed}, "Access-Control-Request-Method": {"PUT"}, "Max-Forwards": {mf}})
		if res.StatusCode != http.StatusNoContent || res.Header.Get("Access-Control-Allow-Origin") != allowed {
			t.Fatalf("preflight from an allowed origin with Max-Forwards %q: %d %v %q, want its 204", mf, res.StatusCode, res.Header, body)
		}
		res, body = do(http.Header{"Origin": {other}, "Access-Control-Request-Method": {"PUT"}, "Max-Forwards": {mf}})
		if res.StatusCode != http.StatusForbidden || res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight from another origin with Max-Forwards %q: %d %v %q, want its 403", mf, res.StatusCode, res.Header, body)
		}
	}
	res, body := do(http.Header{"Origin": {allowed}, "Max-Forwards": {"0"}})
	if res.StatusCode != http.StatusOK || res.Header.Get("Allow") == "" || res.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Fatalf("OPTIONS from an allowed origin with Max-Forwards 0: %d %v %q, want the gateway's 200 with the CORS fields", res.StatusCode, res.Header, body)
	}
	res, body = do(http.Header{"Origin": {allowed}, "Max-Forwards": {"x"}})
	wantProblemAnswer(t, "OPTIONS from an allowed origin with Max-Forwards x", answer{res.StatusCode, res.Header, body}, http.StatusBadRequest, "Max-Forwards")
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != allowed {
		t.Fatalf("the 400 to an allowed origin: Access-Control-Allow-Origin %q", got)
	}
	if got := host.take(); len(got) != 0 {
		t.Fatalf("the host got %q", got)
	}
}

// TestOptionsMaxForwardsAPI: the API is served by the gateway itself, so
// its OPTIONS reach it whatever Max-Forwards says (it is their final
// recipient), with the field as sent.
func TestOptionsMaxForwardsAPI(t *testing.T) {
	t.Parallel()
	var api forwardsSeen
	e := newEnv(t, func(o *Options) { o.API = api.handler() })
	for _, mf := range []string{"0", "3"} {
		res := e.do("OPTIONS", "api."+testZone, "/api/v3/apps", http.Header{"Max-Forwards": {mf}}, nil)
		if body := readBody(t, res); res.StatusCode != http.StatusOK || body != "host answered OPTIONS" {
			t.Fatalf("API OPTIONS with Max-Forwards %s: %d %q, want the API's answer", mf, res.StatusCode, body)
		}
	}
	if got, want := api.take(), []string{"OPTIONS 0", "OPTIONS 3"}; !slices.Equal(got, want) {
		t.Fatalf("the API got %q, want %q", got, want)
	}
}

// TestOptionsMaxForwardsAcrossClusters: a gateway that forwards an
// OPTIONS to the app's owner cluster is an intermediary, and so is the
// owner's: each takes one from Max-Forwards. With 2 the owner's host gets
// 0; with 1 the owner's gateway gets 0 and answers itself; with 0 the
// gateway reached answers, and nothing is forwarded.
func TestOptionsMaxForwardsAcrossClusters(t *testing.T) {
	t.Parallel()
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	res, body := send(t, cl, cs["ap"], "OPTIONS", app, "/m", http.Header{"Max-Forwards": {"2"}})
	if res.StatusCode != http.StatusOK || body != "served by us" {
		t.Fatalf("OPTIONS with Max-Forwards 2 via ap: %d %q, want the owner's host's answer", res.StatusCode, body)
	}
	for _, tc := range []struct{ mf, by string }{{"1", "us"}, {"0", "ap"}} {
		res, body := send(t, cl, cs["ap"], "OPTIONS", app, "/m", http.Header{"Max-Forwards": {tc.mf}})
		if res.StatusCode != http.StatusOK || res.Header.Get("Allow") == "" || body != "" || res.Header.Get("X-Gatehouse-Cluster") != tc.by {
			t.Fatalf("OPTIONS with Max-Forwards %s via ap: %d %v %q, want %s's own 200 with Allow", tc.mf, res.StatusCode, res.Header, body, tc.by)
		}
	}
	var got []string
	for _, c := range cs {
		for _, r := range c.host.requests() {
			got = append(got, c.id+" "+r.Method+" "+r.MaxForwards)
		}
	}
	if want := []string{"us OPTIONS 0"}; !slices.Equal(got, want) {
		t.Fatalf("hosts saw %q, want %q", got, want)
	}
}
