package discovery_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
)

// anyHostServer answers challenges for every host id with one shared key,
// so that many enrolled hosts can share one listener.
func anyHostServer(b testing.TB) (addr string, srv *httptest.Server, pubKey []byte, enrol func(e *env, id string)) {
	k, pub := newKey(b)
	srv = httptest.NewUnstartedServer(nil)
	addr = srv.Listener.Addr().String()
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, req.HostID, addr, req.Nonce, req.Gateway)})
	})
	srv.Start()
	b.Cleanup(srv.Close)
	return addr, srv, pub, func(e *env, id string) { e.keys.enrol(id, pub, "hello") }
}

// waitRoutable polls tightly (unlike WaitFor's 10 ms) so the measured time
// is the system's, not the poll's.
func waitRoutable(b testing.TB, e *env, id string) {
	deadline := time.Now().Add(5 * time.Second)
	for !e.routable("hello", id) {
		if time.Now().After(deadline) {
			b.Fatalf("%s not routable after 5s: %+v", id, e.info(id))
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// BenchmarkAnnounceToRoutable measures one announce on the bus to the host
// being in its app's pool: bus delivery, enrolment check, challenge over
// loopback HTTP, signature check and table publish. It reports the median
// as ms-median; run with -benchtime=20x for the median of 20.
func BenchmarkAnnounceToRoutable(b *testing.B) {
	e := start(b, "", nil)
	addr, _, pub, enrol := anyHostServer(b)
	var took []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bench-%d", i)
		enrol(e, id)
		t0 := time.Now()
		e.publish(host.KindAnnounce, announce(id, addr, pub, "hello"))
		waitRoutable(b, e, id)
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max")
}

// BenchmarkDiscovery10kHosts announces 10,000 hosts, waits until every one
// is verified and routable, and reports the live heap they cost (discovery
// records plus the published routing table, and whatever the in-process
// bus still holds), in bytes and bytes per host.
func BenchmarkDiscovery10kHosts(b *testing.B) {
	const n = 10000
	for range b.N {
		b.StopTimer()
		e := start(b, "", func(o *discovery.Options) {
			o.HeartbeatInterval = time.Minute
			o.HostTTL = time.Hour
			o.VerifyTimeout = 0
		})
		addr, _, pub, enrol := anyHostServer(b)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("host-%05d", i)
			enrol(e, ids[i])
		}
		heap0 := liveHeap()
		b.StartTimer()
		for _, id := range ids {
			body, _ := json.Marshal(announce(id, addr, pub, "hello"))
			if err := e.nc.Publish(host.AnnounceSubject(cluster), body); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.nc.Flush(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for len(e.live.Load().Pool("hello")) < n {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d hosts routable after 60s; e.g. %+v", len(e.live.Load().Pool("hello")), n, e.info(ids[n-1]))
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.StopTimer()
		heap1 := liveHeap()
		if len(e.d.Hosts()) != n {
			b.Fatalf("%d hosts tracked", len(e.d.Hosts()))
		}
		b.ReportMetric(float64(heap1-heap0), "heap-bytes")
		b.ReportMetric(float64(heap1-heap0)/n, "heap-bytes/host")
		b.StartTimer()
	}
}

func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
