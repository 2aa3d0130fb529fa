package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSettingsSaysHowToRunOnDefaults: a config file with no settings
// (/dev/null, as a service's unit might name to mean "none") is refused,
// and the refusal names both ways to start on the defaults, which both
// work: a file of {}, or -config "" for no file (which also overrides a
// GATEHOUSE_CONFIG).
func TestNoSettingsSaysHowToRunOnDefaults(t *testing.T) {
	for _, c := range []struct {
		args, env []string
	}{
		{[]string{"-config", "/dev/null"}, nil},
		{nil, []string{"GATEHOUSE_CONFIG=/dev/null"}},
	} {
		_, err := Load(c.args, c.env)
		if err == nil {
			t.Fatalf("%q %q: loaded", c.args, c.env)
		}
		for _, way := range []string{"{}", `-config ""`} {
			if !strings.Contains(err.Error(), way) {
				t.Errorf("%q %q: %v\ndoes not name %s", c.args, c.env, err, way)
			}
		}
	}
	if cfg, err := Load([]string{"-config", ""}, []string{"GATEHOUSE_CONFIG=/dev/null"}); err != nil || cfg.Zone != Default().Zone {
		t.Errorf(`-config "" over GATEHOUSE_CONFIG=/dev/null: zone %q, %v; want the defaults`, cfg.Zone, err)
	}
	braces := filepath.Join(t.TempDir(), "g.yaml")
	writeFile(t, braces, "{}\n")
	if _, err := Load([]string{"-config", braces}, nil); err != nil {
		t.Errorf("a file of {}: %v; want the defaults", err)
	}
}
