//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// h2Result is one h2load run against one target: HTTP/2 over TLS, each
// client one connection with one stream in flight, so the concurrency is
// the HTTP/1.1 rounds' (one request in flight per connection).
type h2Result struct {
	round    int // the round it ran in, from 0 (as wrkResult's)
	requests int64
	rps      float64
	mean     time.Duration // h2load reports no percentiles: mean and max
	max      time.Duration
	errors   int64   // h2load's "failed": error or non-2xx/3xx answer
	cpu      float64 // CPU seconds the proxy process tree spent during the run
}

// runH2load loads addr over HTTP/2 (TLS, ALPN h2) with GETs whose
// :authority is appHost and measures the proxy's CPU over the same
// interval. h2load does not verify the certificate.
func runH2load(ctx context.Context, conns, threads int, duration time.Duration, addr, path string, fields []string, p *proc) (h2Result, error) {
	ctx, cancel := context.WithTimeout(ctx, duration+30*time.Second)
	defer cancel()
	args := []string{"-c", strconv.Itoa(conns), "-t", strconv.Itoa(min(threads, conns)), "-m", "1",
		// No --warm-up-time: its requests are not counted, but their CPU
		// would be (the caller runs a warm-up of its own).
		"-D", strconv.Itoa(max(1, int(duration.Seconds()))),
		"-H", ":authority: " + appHost}
	args = append(append(args, fieldArgs(fields)...), "https://"+addr+path)
	cmd := exec.CommandContext(ctx, "h2load", args...)
	cmd.SysProcAttr = dieWithHarness()
	cpu := cpuMeter(p)
	out, err := cmd.Output()
	r := h2Result{cpu: cpu()}
	if err != nil {
		return r, fmt.Errorf("h2load: %v: %s", err, out)
	}
	if err := parseH2load(string(out), &r); err != nil {
		return r, fmt.Errorf("h2load output: %v\n%s", err, out)
	}
	return r, nil
}

// parseH2load reads h2load's (nghttp2 1.52) text report.
func parseH2load(out string, r *h2Result) error {
	sc := bufio.NewScanner(strings.NewReader(out))
	var gotRPS, gotReq, gotTime bool
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "finished in ") && len(f) >= 5 && f[4] == "req/s,":
			// finished in 10.00s, 12345.60 req/s, 14.50MB/s
			v, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				return fmt.Errorf("rate %q", f[3])
			}
			r.rps, gotRPS = v, true
		case strings.HasPrefix(line, "requests: "):
			// requests: 100 total, 100 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout
			for i := 1; i+1 < len(f); i += 2 {
				n, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return fmt.Errorf("requests line %q", line)
				}
				switch strings.TrimSuffix(f[i+1], ",") {
				case "done":
					r.requests, gotReq = n, true
				case "failed", "errored": // failed includes errored (and HTTP failures)
					r.errors = max(r.errors, n)
				}
			}
		case strings.HasPrefix(line, "time for request:") && len(f) >= 6:
			//                      min         max         mean   ...
			// time for request:   123us     45.67ms      5.12ms   ...
			var err error
			if r.max, err = parseWrkDuration(f[4]); err != nil {
				return err
			}
			if r.mean, err = parseWrkDuration(f[5]); err != nil {
				return err
			}
			gotTime = true
		}
	}
	if !gotRPS || !gotReq || !gotTime {
		return fmt.Errorf("no rate, request count or request time")
	}
	return nil
}
