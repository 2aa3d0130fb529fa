package config

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

var update = flag.Bool("update", false, "rewrite the want.json sections of testdata/*.txt")

// TestGolden runs every testdata/*.txt case: a file of "-- name --"
// sections (the txtar shape, parsed here to avoid a dependency):
//
//	-- config.yaml --   optional: written to $DIR/config.yaml and passed as -config
//	-- env --           optional: KEY=VALUE lines
//	-- args --          optional: one flag argument per line
//	-- file:NAME --     optional: written to $DIR/NAME (key files)
//	-- want.json --     the normalized Config as JSON, or
//	-- error --         the one-line error
//
// $DIR in any section is the case's temporary directory.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runGolden(t, file)
		})
	}
}

func runGolden(t *testing.T, file string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sections, order := parseSections(t, string(raw))
	dir := t.TempDir()
	expand := func(s string) string { return strings.ReplaceAll(s, "$DIR", dir) }
	var args, env []string
	for _, name := range order {
		body := expand(sections[name])
		switch {
		case name == "config.yaml":
			path := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append([]string{"-config", path}, args...)
		case name == "env":
			env = lines(body)
		case name == "args":
			args = append(args, lines(body)...)
		case strings.HasPrefix(name, "file:"):
			if err := os.WriteFile(filepath.Join(dir, strings.TrimPrefix(name, "file:")), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		case name == "want.json", name == "error":
		default:
			t.Fatalf("unknown section %q", name)
		}
	}
	cfg, err := Load(args, env)
	if want, ok := sections["error"]; ok {
		if err == nil {
			t.Fatalf("Load succeeded, want error %q", want)
		}
		got := strings.ReplaceAll(err.Error(), dir, "$DIR")
		if strings.Contains(got, "\n") {
			t.Errorf("error is not one line: %q", got)
		}
		if got != strings.TrimSpace(want) {
			t.Errorf("error\n got: %s\nwant: %s", got, strings.TrimSpace(want))
		}
		return
	}
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got := strings.ReplaceAll(normalizedJSON(t, cfg), dir, "$DIR")
	want, ok := sections["want.json"]
	if *update {
		writeWant(t, file, raw, got)
		return
	}
	if !ok {
		t.Fatal("case has neither want.json nor error")
	}
	if got != want {
		t.Errorf("config mismatch (go test -run TestGolden -update rewrites)\n got:\n%s\nwant:\n%s", got, want)
	}
}

// normalizedJSON renders cfg with durations as strings, keys in struct
// order.
func normalizedJSON(t *testing.T, cfg Config) string {
	y, err := yaml.MarshalWithOptions(cfg, yaml.UseJSONMarshaler())
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, j, "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.String() + "\n"
}

func writeWant(t *testing.T, file string, raw []byte, got string) {
	s := string(raw)
	if i := strings.Index(s, "-- want.json --\n"); i >= 0 {
		s = s[:i]
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	if err := os.WriteFile(file, []byte(s+"-- want.json --\n"+got), 0o644); err != nil {
		t.Fatal(err)
	}
}

func parseSections(t *testing.T, s string) (map[string]string, []string) {
	out := map[string]string{}
	var order []string
	cur := ""
	for _, line := range strings.SplitAfter(s, "\n") {
		l := strings.TrimRight(line, "\n")
		if strings.HasPrefix(l, "-- ") && strings.HasSuffix(l, " --") && len(l) > 6 {
			cur = l[3 : len(l)-3]
			if _, dup := out[cur]; dup {
				t.Fatalf("duplicate section %q", cur)
			}
			out[cur] = ""
			order = append(order, cur)
			continue
		}
		if cur != "" {
			out[cur] += line
		}
	}
	return out, order
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFileNumbersKeepTheirText: a string key written as an unquoted
// number keeps the text as written. YAML reads 0123 as octal 83 and 1_000
// as 1000, so a cluster id 0123 became 83, silently another cluster (its
// hosts announce on gatehouse.0123.hosts.*), and a digits-only token lost
// its leading zero and no longer matched. Number keys still read numbers.
func TestFileNumbersKeepTheirText(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	src := "cluster:\n  id: 0123\ncontrol:\n  token: 0012345678901234567\nlimits:\n  requests: 0x10\n  unknown_requests: 1_000\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"-config", path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.ID != "0123" || c.Control.Token != "0012345678901234567" {
		t.Errorf("cluster.id %q, control.token %q: want the text as written", c.Cluster.ID, c.Control.Token)
	}
	if c.Limits.Requests != 16 || c.Limits.UnknownRequests != 1000 {
		t.Errorf("limits.requests %d, limits.unknown_requests %d: want 16 and 1000", c.Limits.Requests, c.Limits.UnknownRequests)
	}
	for _, bad := range []string{"cluster:\n  id: 1_000\n", "cluster:\n  id: .inf\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if c, err := Load([]string{"-config", path}, nil); err == nil {
			t.Errorf("%q: loaded as cluster.id %q, want an error", bad, c.Cluster.ID)
		}
	}
}

// TestFileWithByteOrderMark: a file an editor saved with a UTF-8 byte
// order mark (Notepad does) is valid YAML, which allows one at the start
// of the stream; its first key was refused as unknown ("\ufeffzone").
func TestFileWithByteOrderMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, "\ufeffzone: apps.test\nhttp:\n  mode: serve\n")
	c, err := Load([]string{"-config", path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Zone != "apps.test" || c.HTTP.Mode != HTTPModeServe {
		t.Errorf("zone %q, http.mode %q: want apps.test and serve", c.Zone, c.HTTP.Mode)
	}
}

// TestFileNumbersKeepTheirTextUnderAnAnchor: a number given an anchor
// (id: &c 0123) keeps its text too; the anchor hid it, and the id became
// 83 without a word.
func TestFileNumbersKeepTheirTextUnderAnAnchor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, "cluster:\n  id: &c 0123\ncontrol: {token: &t 0012345678901234567}\n")
	c, err := Load([]string{"-config", path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.ID != "0123" || c.Control.Token != "0012345678901234567" {
		t.Errorf("cluster.id %q, control.token %q: want the text as written", c.Cluster.ID, c.Control.Token)
	}
}
