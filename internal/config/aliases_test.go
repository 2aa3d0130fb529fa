package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// laughs is a YAML "billion laughs": levels of aliases, each a list of
// ten of the one before, under a clusters entry, in a few hundred bytes.
func laughs(levels int) string {
	var b strings.Builder
	b.WriteString("clusters:\n  - f0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "    f%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestConfigAliasesAreBounded: the values a file's aliases expand to are
// bounded. A list entry (clusters, auth.issuers) is re-encoded to be
// decoded strictly, which expands every alias: 330 bytes of aliases cost
// 3 GB and 11 s, and one more level took the machine's memory, before
// the entry's unknown field was named.
func TestConfigAliasesAreBounded(t *testing.T) {
	for _, levels := range []int{4, 9} {
		t.Run(fmt.Sprint(levels), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "laughs.yaml")
			writeFile(t, path, laughs(levels))
			done := make(chan error, 1)
			go func() {
				_, err := Load([]string{"-config", path}, nil)
				done <- err
			}()
			select {
			case err := <-done:
				want := "config: " + path + ": holds more than 65536 values, each alias counted as the values it stands for; a configuration file holds a few hundred"
				if err == nil || err.Error() != want {
					t.Errorf("got %v\nwant %s", err, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Load did not return in 10s")
			}
		})
	}
	// Aliases that make a few values are read as ever.
	path := filepath.Join(t.TempDir(), "ok.yaml")
	writeFile(t, path, "trusted_proxies: &p [10.0.0.0/8, 192.168.0.0/16]\ndns:\n  recursion:\n    allow: *p\n    upstreams: [10.0.0.53]\n")
	cfg, err := Load([]string{"-config", path}, nil)
	if err != nil || len(cfg.DNS.Recursion.Allow) != 2 || len(cfg.TrustedProxies) != 2 {
		t.Errorf("a file with one alias: %v, %+v", err, cfg.DNS.Recursion)
	}
}
