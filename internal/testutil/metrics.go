package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// AppSeries counts the series g gathers that are labelled app=app, by
// metric name.
func AppSeries(t testing.TB, g prometheus.Gatherer, app string) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "app" && l.GetValue() == app {
					out[mf.GetName()]++
				}
			}
		}
	}
	return out
}
