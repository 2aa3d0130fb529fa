//go:build linux

package main

import (
	"testing"
	"time"
)

// Reports of h2load 1.52 against a Go HTTP/2 server (trimmed of progress
// lines): one all 2xx, one all 404.
const (
	h2loadOK = `starting benchmark...
Application protocol: h2

finished in 2.00s, 18867.00 req/s, 18.82MB/s
requests: 18867 total, 18867 started, 18867 done, 18867 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 18867 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 18.82MB (19734974) total, 146.63KB (150144) headers (space savings 95.87%), 36.57MB (38344704) data
                     min         max         mean         sd        +/- sd
time for request:       40us      4.97ms       185us       196us    94.10%
time for connect:        0us         0us         0us         0us     0.00%
time to 1st byte:        0us         0us         0us         0us     0.00%
req/s           :    4618.14     4829.26     4715.42      112.61    75.00%
`
	h2load404 = `finished in 2.00s, 14470.00 req/s, 593.56KB/s
requests: 14470 total, 14470 started, 14470 done, 2 succeeded, 14468 failed, 0 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 14468 4xx, 0 5xx
                     min         max         mean         sd        +/- sd
time for request:       45us      4.71ms       248us       208us    93.09%
`
)

func TestParseH2load(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    h2Result
		wantErr bool
	}{
		{"ok", h2loadOK, h2Result{requests: 18867, rps: 18867, mean: 185 * time.Microsecond, max: 4970 * time.Microsecond}, false},
		{"404s are errors, counted once", h2load404, h2Result{requests: 14470, rps: 14470, mean: 248 * time.Microsecond, max: 4710 * time.Microsecond, errors: 14468}, false},
		{"no report", "starting benchmark...\nconnect: Connection refused\n", h2Result{}, true},
		{"bad rate", "finished in 2.00s, x req/s, 1MB/s\n", h2Result{}, true},
	}
	for _, tt := range tests {
		var r h2Result
		err := parseH2load(tt.out, &r)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%s: err = %v, want error %v", tt.name, err, tt.wantErr)
		}
		if err == nil && r != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, r, tt.want)
		}
	}
}
