package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDNSRateLimitKeys: dns.rate_limit and dns.rate_limit_slip, on by
// default, from the file, the environment and flags, and each bad value
// one line naming the key and where it came from.
func TestDNSRateLimitKeys(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		env         []string
		args        []string
		limit, slip int
		err         string
	}{
		{name: "on by default", limit: 200, slip: 2},
		{name: "file", yaml: "dns: {rate_limit: 5, rate_limit_slip: 1}\n", limit: 5, slip: 1},
		{name: "environment", env: []string{"GATEHOUSE_DNS_RATE_LIMIT=10", "GATEHOUSE_DNS_RATE_LIMIT_SLIP=0"}, limit: 10, slip: 0},
		{
			name:  "flags win over env and file",
			yaml:  "dns: {rate_limit: 5}\n",
			env:   []string{"GATEHOUSE_DNS_RATE_LIMIT=10"},
			args:  []string{"-dns-rate-limit=1000", "-dns-rate-limit-slip", "10"},
			limit: 1000, slip: 10,
		},
		{name: "0 turns it off", args: []string{"-dns-rate-limit=0"}, limit: 0, slip: 2},
		{
			name: "negative, from the environment",
			env:  []string{"GATEHOUSE_DNS_RATE_LIMIT=-1"},
			err:  "config: dns.rate_limit (GATEHOUSE_DNS_RATE_LIMIT): must be 0 (no limit) to 1000 responses a second, got -1",
		},
		{
			name: "too large, in the file",
			yaml: "dns: {rate_limit: 1001}\n",
			err:  "config: dns.rate_limit: must be 0 (no limit) to 1000 responses a second, got 1001",
		},
		{
			name: "not an integer, a flag",
			args: []string{"-dns-rate-limit=20/s"},
			err:  `config: dns.rate_limit (-dns-rate-limit): want an integer, got "20/s"`,
		},
		{
			name: "not an integer, in the file",
			yaml: "dns: {rate_limit: 2.5}\n",
			err:  `config: $FILE: dns.rate_limit: want an integer, got "2.5"`,
		},
		{
			name: "slip negative, in the file",
			yaml: "dns: {rate_limit_slip: -2}\n",
			err:  "config: dns.rate_limit_slip: must be 0 (drop every response over the limit) to 10, got -2",
		},
		{
			name: "slip too large, a flag",
			args: []string{"-dns-rate-limit-slip=11"},
			err:  "config: dns.rate_limit_slip (-dns-rate-limit-slip): must be 0 (drop every response over the limit) to 10, got 11",
		},
		{
			name: "slip not an integer, from the environment",
			env:  []string{"GATEHOUSE_DNS_RATE_LIMIT_SLIP=half"},
			err:  `config: dns.rate_limit_slip (GATEHOUSE_DNS_RATE_LIMIT_SLIP): want an integer, got "half"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			file := filepath.Join(t.TempDir(), "g.yaml")
			if tt.yaml != "" {
				writeFile(t, file, tt.yaml)
				args = append([]string{"-config", file}, args...)
			}
			cfg, err := Load(args, tt.env)
			if tt.err != "" {
				want := strings.ReplaceAll(tt.err, "$FILE", file)
				if err == nil || err.Error() != want {
					t.Fatalf("got %v\nwant %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DNS.RateLimit != tt.limit || cfg.DNS.RateLimitSlip != tt.slip {
				t.Errorf("got rate_limit %d, rate_limit_slip %d; want %d and %d", cfg.DNS.RateLimit, cfg.DNS.RateLimitSlip, tt.limit, tt.slip)
			}
		})
	}
}
