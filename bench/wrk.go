//go:build linux

package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// wrkResult is one wrk run against one target.
type wrkResult struct {
	round    int // the round it ran in, from 0: an A/B pairs the builds' runs by it
	requests int64
	rps      float64
	p50, p99 time.Duration
	errors   int64   // non-2xx/3xx responses plus socket errors
	cpu      float64 // CPU seconds the proxy process tree spent during the run
	backend  float64 // CPU seconds the backend spent during the run
}

type wrkOpts struct {
	conns, threads int
	duration       time.Duration
	backend        *proc    // measured alongside the proxy, for reference; may be nil
	tls            bool     // https: the proxy terminates TLS (wrk keeps each connection's session)
	path           string   // the URL path to GET; "" is "/"
	fields         []string // request fields beyond Host, "Name: value"
}

// browserFields are the request fields Firefox 128 sends on a page load
// over HTTP/1.1, Host aside: what -headers browser adds to every request.
// A proxy's per-field work (parsing, its header structures, copying them
// to the backend) shows with them; wrk alone sends Host and nothing else.
var browserFields = []string{
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
	"Accept-Language: en-US,en;q=0.5",
	"Accept-Encoding: gzip, deflate, br, zstd",
	"Referer: http://app.bench.test/",
	"Cookie: session=4f1c2a9e7b3d4c5e8f6a0b1c2d3e4f5a; theme=dark",
	"Upgrade-Insecure-Requests: 1",
	"Sec-Fetch-Dest: document",
	"Sec-Fetch-Mode: navigate",
	"Sec-Fetch-Site: same-origin",
	"Sec-Fetch-User: ?1",
	"Priority: u=0, i",
}

// requestFields is the field list for -headers mode.
func requestFields(mode string) []string {
	if mode == "browser" {
		return browserFields
	}
	return nil
}

// fieldArgs is fields as -H arguments, for wrk and h2load alike.
func fieldArgs(fields []string) []string {
	var args []string
	for _, f := range fields {
		args = append(args, "-H", f)
	}
	return args
}

// runWrk loads addr with keep-alive GETs for appHost and measures the
// proxy's CPU over the same interval.
func runWrk(ctx context.Context, o wrkOpts, addr string, p *proc) (wrkResult, error) {
	ctx, cancel := context.WithTimeout(ctx, o.duration+30*time.Second)
	defer cancel()
	args := []string{"-t", strconv.Itoa(o.threads), "-c", strconv.Itoa(o.conns),
		"-d", fmt.Sprintf("%ds", max(1, int(o.duration.Seconds()))),
		"--timeout", "5s", "--latency", "-H", "Host: " + appHost}
	args = append(append(args, fieldArgs(o.fields)...), scheme(o.tls)+"://"+addr+cmp.Or(o.path, "/"))
	cmd := exec.CommandContext(ctx, "wrk", args...)
	cmd.SysProcAttr = dieWithHarness()
	cpu, beCPU := cpuMeter(p), cpuMeter(o.backend)
	out, err := cmd.Output()
	r := wrkResult{cpu: cpu(), backend: beCPU()}
	if err != nil {
		return r, fmt.Errorf("wrk: %v: %s", err, out)
	}
	if err := parseWrk(string(out), &r); err != nil {
		return r, fmt.Errorf("wrk output: %v\n%s", err, out)
	}
	return r, nil
}

// parseWrk reads wrk 4's text report.
func parseWrk(out string, r *wrkResult) error {
	sc := bufio.NewScanner(strings.NewReader(out))
	var gotReq, gotRPS bool
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == "50%":
			r.p50, _ = parseWrkDuration(f[1])
		case len(f) >= 2 && f[0] == "99%":
			r.p99, _ = parseWrkDuration(f[1])
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			r.requests, _ = strconv.ParseInt(f[0], 10, 64)
			gotReq = true
		case len(f) >= 2 && f[0] == "Requests/sec:":
			r.rps, _ = strconv.ParseFloat(f[1], 64)
			gotRPS = true
		case strings.HasPrefix(sc.Text(), "  Non-2xx or 3xx responses:") && len(f) == 5:
			n, _ := strconv.ParseInt(f[4], 10, 64)
			r.errors += n
		case len(f) > 2 && f[0] == "Socket" && f[1] == "errors:":
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 2; i+1 < len(f); i += 2 {
				n, _ := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				r.errors += n
			}
		}
	}
	if !gotReq || !gotRPS {
		return fmt.Errorf("no request count or rate")
	}
	return nil
}

// parseWrkDuration reads wrk's "812.00us", "1.23ms", "2.00s", "1.00m".
func parseWrkDuration(s string) (time.Duration, error) {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(x * float64(u.unit)), nil
		}
	}
	return 0, fmt.Errorf("duration %q", s)
}

func scheme(tls bool) string {
	if tls {
		return "https"
	}
	return "http"
}
