package bus

import (
	"testing"
	"time"
)

// cutOffWatch moves only after a server has failed every probe for the
// whole bound, counts from the start of the first failed probe, starts
// over on a pass or another server, and moves at most once per bound.
func TestCutOffWatch(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type probe struct {
		server       string
		began, ended float64 // seconds after t0
		failed       bool
		move         bool
	}
	for _, tc := range []struct {
		name   string
		probes []probe
	}{
		{"passes never move", []probe{{"a", 0, 0.1, false, false}, {"a", 20, 20.1, false, false}}},
		{"failing for the bound moves", []probe{{"a", 0, 3, true, false}, {"a", 5, 8, true, false}, {"a", 10, 10.1, true, true}}},
		{"from the failed probe's start", []probe{{"a", 0, 3, true, false}, {"a", 7, 10, true, true}}},
		{"a pass starts over", []probe{{"a", 0, 1, true, false}, {"a", 5, 6, false, false}, {"a", 7, 8, true, false}, {"a", 12, 13, true, false}, {"a", 17, 18, true, true}}},
		{"another server starts over", []probe{{"a", 0, 1, true, false}, {"b", 5, 6, true, false}, {"b", 12, 13, true, false}, {"b", 15, 16, true, true}}},
		{"once per bound", []probe{
			{"a", 0, 1, true, false}, {"a", 10, 11, true, true},
			{"b", 12, 13, true, false}, {"b", 23, 24, true, false}, {"b", 38, 39, true, false}, {"b", 41, 42, true, true},
			{"c", 43, 44, true, false}, {"c", 55, 56, true, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := cutOffWatch{times: defaultCutOffTimes}
			for i, p := range tc.probes {
				d, move := w.probed(p.server, at(p.began), p.failed, at(p.ended))
				if move != p.move {
					t.Fatalf("probe %d (%+v): move %v after failing for %s", i, p, move, d)
				}
			}
		})
	}
}
