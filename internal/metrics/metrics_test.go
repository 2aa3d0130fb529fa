package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s.Requests.WithLabelValues("hello", Class(204), Method("GET")).Inc()
	s.ActiveConnections.Inc()
	if n := testutil.CollectAndCount(s.Requests); n != 1 {
		t.Fatalf("requests series = %d", n)
	}
	if _, err := New(reg); err == nil {
		t.Fatal("second New on the same registry did not fail")
	}
	if _, err := New(nil); err != nil {
		t.Fatalf("New(nil): %v", err)
	}
	if NewRegistry() == nil {
		t.Fatal("nil registry")
	}
}

// TestActiveConnectionsNames: the drain gauge is on /metrics under
// DESIGN's name, active_connections, and under the namespaced one, with
// the same value.
func TestActiveConnectionsNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s.ActiveConnections.Add(3)
	s.ActiveConnections.Dec()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if g := m.GetGauge(); g != nil {
				got[mf.GetName()] = g.GetValue()
			}
		}
	}
	for _, name := range []string{"active_connections", "gatehouse_active_connections"} {
		if v, ok := got[name]; !ok || v != 2 {
			t.Errorf("%s = %v (exported: %v), want 2", name, v, ok)
		}
	}
}

func TestLabels(t *testing.T) {
	classes := map[int]string{100: "1xx", 101: "1xx", 200: "2xx", 308: "3xx", 404: "4xx", 499: "4xx", 502: "5xx", 999: "5xx", 0: "1xx"}
	for code, want := range classes {
		if got := Class(code); got != want {
			t.Errorf("Class(%d) = %s, want %s", code, got, want)
		}
	}
	methods := map[string]string{"GET": "GET", "PATCH": "PATCH", "get": "OTHER", "BREW": "OTHER", "": "OTHER"}
	for m, want := range methods {
		if got := Method(m); got != want {
			t.Errorf("Method(%q) = %s, want %s", m, got, want)
		}
	}
}

// TestApp checks that recording through the cached App lands in the same
// series as WithLabelValues, for several (class, method) pairs and apps.
func TestApp(t *testing.T) {
	s, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a := s.App("hello")
	if s.App("hello") != a {
		t.Fatal("App built twice for one app")
	}
	a.Request(200, "GET", 10*time.Millisecond)
	a.Request(204, "GET", 0)
	a.Request(404, "BREW", 0)
	s.App("other").Request(503, "POST", time.Second)
	for _, c := range []struct {
		app, class, method string
		want               float64
	}{
		{"hello", "2xx", "GET", 2}, {"hello", "4xx", "OTHER", 1}, {"other", "5xx", "POST", 1}, {"hello", "5xx", "POST", 0},
	} {
		if got := testutil.ToFloat64(s.Requests.WithLabelValues(c.app, c.class, c.method)); got != c.want {
			t.Errorf("%s %s %s = %v, want %v", c.app, c.class, c.method, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(s.Duration); n != 2 {
		t.Errorf("duration series = %d, want 2", n)
	}
}

func BenchmarkAppRequest(b *testing.B) {
	s, _ := New(nil)
	b.ReportAllocs()
	for b.Loop() {
		s.App("hello").Request(200, "GET", time.Millisecond)
	}
}

func BenchmarkLabelValues(b *testing.B) {
	s, _ := New(nil)
	b.ReportAllocs()
	for b.Loop() {
		s.Requests.WithLabelValues("hello", Class(200), Method("GET")).Inc()
		s.Duration.WithLabelValues("hello").Observe(0.001)
	}
}
