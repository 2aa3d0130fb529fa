package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFileSettingEveryKeyLoads: the file's shape is bounded before it is
// parsed (checkShape), and no file an operator can write may go past the
// bound. The largest mapping a configuration file can hold is its top
// level with every key written dotted (tls.acme.email: …), and the
// deepest a nested one; each, setting every key to its default, with
// the complex-key form (? key) too, loads as no file does.
func TestFileSettingEveryKeyLoads(t *testing.T) {
	def := Default()
	value := func(k key) string {
		switch v := k.field(&def).(type) {
		case *string:
			return strconv.Quote(*v)
		case *bool:
			return strconv.FormatBool(*v)
		case *int:
			return strconv.Itoa(*v)
		case *time.Duration:
			return strconv.Quote(v.String())
		case *[]string:
			q := make([]string, len(*v))
			for i, s := range *v {
				q[i] = strconv.Quote(s)
			}
			return "[" + strings.Join(q, ", ") + "]"
		case *[]Peer, *[]Issuer:
			return "[]"
		}
		t.Fatalf("key %s: unhandled type", k.name)
		return ""
	}
	var dotted, complexKeys strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&dotted, "%s: %s\n", k.name, value(k))
		fmt.Fprintf(&complexKeys, "? %s\n: %s\n", k.name, value(k))
	}
	// nested writes every key under its sections, indented by two.
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, k.name)
	}
	sort.Strings(names)
	var nested strings.Builder
	var open []string
	for _, n := range names {
		parts := strings.Split(n, ".")
		common := 0
		for common < len(open) && common < len(parts)-1 && open[common] == parts[common] {
			common++
		}
		open = open[:common]
		for _, p := range parts[common : len(parts)-1] {
			fmt.Fprintf(&nested, "%s%s:\n", strings.Repeat("  ", len(open)), p)
			open = append(open, p)
		}
		fmt.Fprintf(&nested, "%s%s: %s\n", strings.Repeat("  ", len(open)), parts[len(parts)-1], value(keyByName[n]))
	}
	defaults, err := Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(defaults)
	for _, tc := range []struct{ name, file string }{
		{"dotted", dotted.String()},
		{"dotted, CRLF and a byte order mark", "\ufeff" + strings.ReplaceAll(dotted.String(), "\n", "\r\n")},
		{"dotted complex keys", complexKeys.String()},
		{"nested", nested.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gatehouse.yaml")
			writeFile(t, path, tc.file)
			cfg, err := Load([]string{"-config", path}, nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, tc.file)
			}
			if got, _ := json.Marshal(cfg); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}
