package gatehouse

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/gatehouse-dev/gatehouse/"

// allowed lists, per package, the internal packages it may import directly
// (STYLE §6.1): imports point only down the layer table. A package missing
// here may import nothing internal.
var allowed = map[string][]string{
	"internal/verify":    {"host"},
	"internal/route":     {"internal/policy"}, // STYLE §6.1 allows cors, limit, auth, policy
	"internal/store":     {"host", "internal/edkey", "internal/jsontext", "internal/route"},
	"internal/discovery": {"host", "internal/logcut", "internal/route", "internal/verify"},
	"internal/peers":     {"internal/cluster", "internal/problem"},
	"internal/proxy":     {"internal/deadline", "internal/httpwire", "internal/metrics", "internal/problem", "internal/route", "internal/sock"},
	"internal/gateway": {"internal/auth", "internal/cluster", "internal/cors", "internal/httpwire", "internal/limit", "internal/logcut", "internal/metrics",
		"internal/policy", "internal/problem", "internal/proxy", "internal/route"},
	"internal/lane":      {"internal/deadline", "internal/httpwire", "internal/workers"},
	"internal/h2":        {"internal/httpwire", "internal/workers"},
	"internal/edge":      {"internal/deadline", "internal/h2", "internal/httpwire", "internal/lane", "internal/logcut", "internal/pipe", "internal/problem", "internal/route", "internal/sni", "internal/sock", "internal/workers"},
	"internal/workers":   {},
	"internal/api":       {"internal/edkey", "internal/jsontext", "internal/logcut", "internal/problem", "internal/route", "internal/store", "internal/verify", "internal/dns", "internal/auth", "internal/limit"},
	"internal/config":    {"internal/route", "internal/cluster", "internal/edkey"},
	"internal/edkey":     {},
	"internal/jsontext":  {},
	"internal/cluster":   {"internal/edkey"},
	"internal/gatehouse": {"*"},
	"internal/gcfloor":   {},
	"internal/logcut":    {},
	"internal/dashboard": {},
	"internal/auth":      {"internal/edkey", "internal/httpwire"},
	"cmd/gatehouse":      {"internal/gatehouse", "internal/config", "internal/gcfloor", "internal/logcut", "host"},
}

// dataPlane must not reach the bus, even indirectly: it reads route.Live,
// so "if NATS is unreachable the gateway keeps serving" holds by
// construction (DESIGN §10).
var dataPlane = []string{"internal/httpwire", "internal/h2", "internal/lane", "internal/sock", "internal/deadline", "internal/edge", "internal/sni", "internal/pipe", "internal/workers", "internal/gateway", "internal/proxy",
	"internal/route", "internal/cluster", "internal/cors", "internal/limit", "internal/auth", "internal/policy"}

func goList(t *testing.T, format string, pkgs ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", "{{.ImportPath}}:{{join ." + format + " \" \"}}"}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, deps, _ := strings.Cut(line, ":")
		m[strings.TrimPrefix(p, mod)] = strings.Fields(deps)
	}
	return m
}

func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	direct := goList(t, "Imports", "../../...")
	for pkg, imps := range direct {
		// Test-helper packages (testutil, tlsmgrtest, in the style of dnstest)
		// exist to be imported by tests only; the harness is a program.
		if strings.HasPrefix(pkg, "internal/testutil") || strings.HasSuffix(pkg, "test") || strings.HasPrefix(pkg, "bench") {
			continue
		}
		ok := allowed[pkg]
		for _, imp := range imps {
			if imp == "testing" || imp == mod+"internal/testutil" {
				t.Errorf("%s imports %s outside tests", pkg, imp)
			}
			if strings.HasPrefix(imp, "github.com/nats-io/nats-server") && pkg != "internal/bus" {
				t.Errorf("%s imports nats-server; only internal/bus may", pkg)
			}
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			if !slices.Contains(ok, "*") && !slices.Contains(ok, dep) {
				t.Errorf("%s imports %s: not allowed by the layer table (STYLE §6.1)", pkg, dep)
			}
		}
	}
	var dp []string
	for _, p := range dataPlane {
		dp = append(dp, "../../"+p)
	}
	for pkg, deps := range goList(t, "Deps", dp...) {
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/nats-io/") || d == mod+"internal/store" || d == mod+"internal/bus" {
				t.Errorf("data-plane package %s depends on %s", pkg, d)
			}
		}
	}
}
