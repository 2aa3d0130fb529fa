package gatehouse

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// failingCollector is a collector whose every gathering fails, as the
// process collector's does when the process is out of file descriptors.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("open /proc/self/fd: too many open files"))
}

// TestScrapeSurvivesAFailingCollector: one collector that fails costs its
// own series, not the scrape. By promhttp's default it made /metrics a
// 500 with the error as its body: no gauge, no counter, at the moment
// the operator needs them.
func TestScrapeSurvivesAFailingCollector(t *testing.T) {
	cfg := testConfig(t)
	mgmt := testutil.FreeAddr(t)
	cfg.Management.Addr = mgmt
	cfg.Bus.URL = []string{"nats://" + testutil.FreeAddr(t)} // no bus: starting is enough
	logs := new(testutil.SyncBuffer)
	g, err := New(cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	g.Registry().MustRegister(failingCollector{prometheus.NewDesc("test_broken", "always fails", nil, nil)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, 5*time.Second, func() bool { c, _ := mgmtGet(t, mgmt, "/healthz"); return c == 200 }, "healthz")
	// The error counter is gathered before it counts the scrape's own
	// error: the nth scrape shows n-1.
	for scrape := 1; scrape <= 2; scrape++ {
		code, body := mgmtGet(t, mgmt, "/metrics")
		if code != 200 {
			t.Fatalf("scrape %d with a failing collector: %d %.200s", scrape, code, body)
		}
		for _, want := range []string{"gatehouse_bus_connected 0", `promhttp_metric_handler_errors_total{cause="gathering"} ` + string(rune('0'+scrape-1))} {
			if !strings.Contains(body, want) {
				t.Errorf("scrape %d lacks %q", scrape, want)
			}
		}
		if strings.Contains(body, "test_broken") {
			t.Errorf("scrape %d shows the failing collector's series", scrape)
		}
	}
	if !strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the collector's error was not logged:\n%s", logs.String())
	}
}
