package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigFileIsBounded: -config is read up to a bound. Read whole, a
// file that never ends (/dev/zero, given by a slip of the shell) took
// memory until the process died of it, with a runtime stack trace rather
// than a line naming the file, and a file of gigabytes was held in memory
// several times over before it was refused, or taken.
func TestConfigFileIsBounded(t *testing.T) {
	huge := filepath.Join(t.TempDir(), "huge.yaml")
	// A valid file, padded with comments past the bound: the size alone
	// refuses it.
	pad := strings.Repeat("# "+strings.Repeat("x", 98)+"\n", maxConfigFile/100+1)
	writeFile(t, huge, "zone: apps.test\n"+pad)
	for _, tc := range []struct{ name, path, want string }{
		{"huge", huge, "config: " + huge + ": larger than 1 MiB (1048576 bytes); a configuration file is a few KB"},
		{"endless", "/dev/zero", "config: /dev/zero: larger than 1 MiB (1048576 bytes); a configuration file is a few KB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.path); err != nil {
				t.Skip(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := Load([]string{"-config", tc.path}, nil)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || err.Error() != tc.want {
					t.Errorf("got %v\nwant %s", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Load did not return in 10s")
			}
		})
	}
	// At the bound exactly, the file is read.
	edge := filepath.Join(t.TempDir(), "edge.yaml")
	head := "zone: apps.test\n"
	writeFile(t, edge, head+strings.Repeat("#", maxConfigFile-len(head)-1)+"\n")
	if cfg, err := Load([]string{"-config", edge}, nil); err != nil || cfg.Zone != "apps.test" {
		t.Errorf("a file of exactly %d bytes: got zone %q, %v", maxConfigFile, cfg.Zone, err)
	}
}
