package metrics

import (
	"testing"

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
