//go:build linux

package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestReportRunLineRepeatsTheRun checks that the command the report gives
// for the run, read back as flags, is the run that was measured, and that
// the commit line does not claim a prebuilt gatehouse was built from the
// work tree.
func TestReportRunLineRepeatsTheRun(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"-perf", "-tls-duration", "7s", "-tls-streams", "2", "-tls-workers", "8", "-rounds", "2", "-duration", "3s"},
		{"-gatehouse", "/opt/gh-a", "-gatehouse-b", "/opt/gh-b", "-targets", "gatehouse,nginx", "-idle", "0", "-tls=false", "-h2=false"},
		{"-headers", "browser", "-peer-fields", "-x25519-only", "-body", "65536", "-conns", "32", "-threads", "1", "-l7-tls-new=false"},
	} {
		cfg, err := parseFlags(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		md := newReport(cfg, t.TempDir()).markdown()
		_, rest, ok := strings.Cut(md, "- run: `go run ./bench ")
		if !ok {
			t.Fatalf("%q: no run line in\n%s", args, md)
		}
		line, _, _ := strings.Cut(rest, "`")
		again, err := parseFlags(strings.Fields(line))
		if err != nil {
			t.Fatalf("%q: run line %q does not parse: %v", args, line, err)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Errorf("%q: run line %q is another run:\n got %+v\nwant %+v", args, line, again, cfg)
		}
		commit := strings.SplitN(strings.SplitN(md, "- commit: ", 2)[1], "\n", 2)[0]
		if built := strings.Contains(commit, "built from this work tree"); built != (cfg.gatehouse == "") {
			t.Errorf("%q: commit line %q", args, commit)
		}
	}
}
