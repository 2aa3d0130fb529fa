package gateway

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkOwnerForward measures what an owner forward adds to a request
// on loopback: each iteration sends one GET straight to the owner's
// gateway and one through a non-owner's, and the p50/p99 of both and of
// the difference are reported (µs).
func BenchmarkOwnerForward(b *testing.B) {
	cs := startClusters(b, clusterSetup{ids: threeIDs})
	cl := clClient(b)
	app := ownedBy(b, "ap", threeIDs)
	get := func(via string) time.Duration {
		start := time.Now()
		res, body := send(b, cl, cs[via], http.MethodGet, app, "/bench", nil)
		d := time.Since(start)
		if res.StatusCode != 200 || body != "served by ap" {
			b.Fatalf("via %s: %d %q", via, res.StatusCode, body)
		}
		return d
	}
	get("ap") // warm both connection pools
	get("eu")
	var direct, forwarded []time.Duration
	for b.Loop() {
		direct = append(direct, get("ap"))
		forwarded = append(forwarded, get("eu"))
	}
	slices.Sort(direct)
	slices.Sort(forwarded)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Microseconds())
	}
	b.ReportMetric(q(direct, 0.50), "direct-p50-µs")
	b.ReportMetric(q(direct, 0.99), "direct-p99-µs")
	b.ReportMetric(q(forwarded, 0.50), "forwarded-p50-µs")
	b.ReportMetric(q(forwarded, 0.99), "forwarded-p99-µs")
	b.ReportMetric(q(forwarded, 0.50)-q(direct, 0.50), "added-p50-µs")
	b.ReportMetric(q(forwarded, 0.99)-q(direct, 0.99), "added-p99-µs")
}
