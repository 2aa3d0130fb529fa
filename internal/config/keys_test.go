package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// TestKeysCoverConfig proves that every leaf of Config has exactly one
// key (so one flag and one variable), and that flags and variables are
// unique.
func TestKeysCoverConfig(t *testing.T) {
	var leaves []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue // Load's notes, not a key
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if prefix != "" {
				name = prefix + "." + name
			}
			if f.Type.Kind() == reflect.Struct && f.Type.String() != "time.Duration" {
				walk(name, f.Type)
				continue
			}
			leaves = append(leaves, name)
		}
	}
	walk("", reflect.TypeOf(Config{}))
	var names []string
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, k := range keys {
		names = append(names, k.name)
		if flags[k.flag] || envs[k.env()] {
			t.Errorf("key %s: duplicate flag or variable", k.name)
		}
		flags[k.flag], envs[k.env()] = true, true
		k.field(&Config{}) // must not panic
	}
	sort.Strings(leaves)
	sort.Strings(names)
	if !reflect.DeepEqual(leaves, names) {
		t.Errorf("keys and Config leaves differ\nleaves: %v\n  keys: %v", leaves, names)
	}
}

func TestUsageListsEveryFlag(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	for _, k := range keys {
		if !strings.Contains(b.String(), "  -"+k.flag+"\n") || !strings.Contains(b.String(), k.env()) {
			t.Errorf("usage lacks -%s / %s", k.flag, k.env())
		}
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/g.yaml"
	writeFile(t, path, "zone: apps.test\n")
	cfg, err := Load(nil, []string{"GATEHOUSE_CONFIG=" + path, "GATEHOUSE_CONTROL_TOKEN=tok-0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Zone != "apps.test" || cfg.Control.Token != "tok-0123456789abcdef" {
		t.Errorf("got zone %q token %q", cfg.Zone, cfg.Control.Token)
	}
	// -config on the command line wins over GATEHOUSE_CONFIG
	other := dir + "/h.yaml"
	writeFile(t, other, "zone: other.test\n")
	cfg, err = Load([]string{"-config", other}, []string{"GATEHOUSE_CONFIG=" + path})
	if err != nil || cfg.Zone != "other.test" {
		t.Errorf("got %q, %v; want other.test", cfg.Zone, err)
	}
}

// A configuration file that cannot be opened is named with where its path
// came from, as a refused value is: a GATEHOUSE_CONFIG left in a service's
// environment, or a shell's, sends the operator to look for a -config
// they never typed. The line said only "config: open FILE: …".
func TestConfigFileNotFoundNamesItsSource(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{nil, []string{"GATEHOUSE_CONFIG=" + missing},
			"config: GATEHOUSE_CONFIG: open " + missing + ": no such file or directory"},
		{[]string{"-config", missing}, nil,
			"config: -config: open " + missing + ": no such file or directory"},
		{[]string{"-config", dir}, []string{"GATEHOUSE_CONFIG=" + missing},
			"config: -config: read " + dir + ": is a directory"},
	} {
		_, err := Load(tc.args, tc.env)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q with %q: got %v\nwant %s", tc.args, tc.env, err, tc.want)
		}
	}
}

// A peer cluster's field left out of the file is called missing, naming
// what to give: it read "must be 32 bytes (an Ed25519 key), got 0" for a
// public_key left out, and "got \"\"" for the id and the url.
func TestPeerFieldLeftOut(t *testing.T) {
	const key = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
	for _, tc := range []struct{ yaml, want string }{
		{"clusters: [{url: https://us-1.example.com, public_key: " + key + "}]",
			"config: clusters[0].id: missing: give the peer cluster's id, a DNS label"},
		{"clusters: [{id: us-1, public_key: " + key + "}]",
			"config: clusters[0].url: missing: give the peer cluster's public base URL, like https://gw.example.com"},
		{"clusters: [{id: us-1, url: https://us-1.example.com}]",
			"config: clusters[0].public_key: missing: give the peer cluster's public key, the std base64 gatehouse keygen prints"},
	} {
		path := filepath.Join(t.TempDir(), "g.yaml")
		writeFile(t, path, tc.yaml+"\n")
		_, err := Load([]string{"-config", path}, nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	if _, err := Load([]string{"-h"}, nil); err != ErrHelp {
		t.Errorf("got %v, want ErrHelp", err)
	}
}

// TestReferenceDocumentsEveryKey keeps docs/config.md in step with the
// key table: every key, flag and variable appears in one table row.
func TestReferenceDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, k := range keys {
		row := fmt.Sprintf("| `%s` | `-%s` | `%s` |", k.name, k.flag, k.env())
		if !strings.Contains(doc, row) {
			t.Errorf("docs/config.md lacks the row %s", row)
		}
	}
}

// TestReferenceRowsAreKeys is the other way round: every row of
// docs/config.md's key tables names a key of the table, once, with its
// flag, its variable and the default the code has, so a key removed or
// renamed, or a default changed on one side only, does not leave the
// reference promising what serve does not do.
func TestReferenceRowsAreKeys(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.HasPrefix(strings.TrimSpace(cells[3]), "`GATEHOUSE_") {
			continue // not a key row
		}
		unquote := func(c string) string { return strings.Trim(strings.TrimSpace(c), "`") }
		name, flag, env, doc := unquote(cells[1]), unquote(cells[2]), unquote(cells[3]), strings.TrimSpace(cells[4])
		k, ok := keyByName[name]
		if !ok {
			t.Errorf("docs/config.md documents %q, which is no key", name)
			continue
		}
		if seen[name] {
			t.Errorf("docs/config.md documents %q twice", name)
		}
		seen[name] = true
		if "-"+k.flag != flag || k.env() != env {
			t.Errorf("%s: documented as %s / %s, is -%s / %s", name, flag, env, k.flag, k.env())
		}
		want := strings.Trim(defaultString(k, &def), `"`)
		if want == "" {
			want = "*(none)*"
			if doc == "*(empty)*" {
				want = doc
			}
		} else {
			want = "`" + want + "`"
		}
		if doc != want {
			t.Errorf("%s: documented default %s, the code's is %s", name, doc, want)
		}
	}
	if len(seen) != len(keys) {
		t.Errorf("docs/config.md has rows for %d keys, the table has %d", len(seen), len(keys))
	}
}

// TestReferenceExamplesLoad reads every YAML example of docs/config.md
// against the key table, as serve reads a file: a user copies them, so an
// unknown key, a misplaced section or a value of the wrong type in one
// would be the first thing they hit. (The key files the examples name are
// not on this machine; Validate, which looks for them, is not run.)
func TestReferenceExamplesLoad(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```yaml\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("found %d YAML examples, want the complete file and the clusters one", len(blocks))
	}
	for i, block := range blocks {
		body, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatalf("example %d does not end", i)
		}
		path := filepath.Join(t.TempDir(), "example.yaml")
		writeFile(t, path, body)
		cfg := Default()
		if err := loadFile(&cfg, path); err != nil {
			t.Errorf("example %d:\n%s\n%v", i, body, err)
		}
	}
}

func TestHelpers(t *testing.T) {
	c := Default()
	if got := c.ClusterKeyPath(); got != "gatehouse-data/cluster.key" {
		t.Errorf("default key path %q", got)
	}
	c.Cluster.Key = "/etc/k.pem"
	if got := c.ClusterKeyPath(); got != "/etc/k.pem" {
		t.Errorf("key path %q", got)
	}
	for lvl, want := range map[string]string{"debug": "DEBUG", "info": "INFO", "warn": "WARN", "error": "ERROR"} {
		if got := (Log{Level: lvl}).SlogLevel().String(); got != want {
			t.Errorf("%s: %s", lvl, got)
		}
	}
	if got := (&Config{TrustedProxies: []string{"10.0.0.0/8", "::1/128"}}).TrustedPrefixes(); len(got) != 2 || got[1].String() != "::1/128" {
		t.Errorf("prefixes %v", got)
	}
	if got := (&Config{DNS: DNS{Recursion: Recursion{Allow: []string{"127.0.0.2/32"}}}}).RecursionPrefixes(); len(got) != 1 || got[0].String() != "127.0.0.2/32" {
		t.Errorf("recursion prefixes %v", got)
	}
}

// TestEmptyConfigFlagWinsOverVariable: -config= (empty) on the command
// line means no file, as an empty value of any other flag wins over its
// variable (-http= turns the listener off whatever GATEHOUSE_HTTP says).
// It was taken as no flag at all, and GATEHOUSE_CONFIG's file was read.
func TestEmptyConfigFlagWinsOverVariable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.yaml")
	writeFile(t, path, "zone: apps.test\n")
	env := []string{"GATEHOUSE_CONFIG=" + path}
	for _, args := range [][]string{{"-config="}, {"-config", ""}} {
		cfg, err := Load(args, env)
		if err != nil || cfg.Zone != "" {
			t.Errorf("%q with %s: zone %q, %v; want the defaults (no file)", args, env[0], cfg.Zone, err)
		}
	}
	if cfg, err := Load(nil, env); err != nil || cfg.Zone != "apps.test" {
		t.Errorf("no -config with %s: zone %q, %v; want the file's", env[0], cfg.Zone, err)
	}
}
