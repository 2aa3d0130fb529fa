package route

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/policy"
)

// Mode says who terminates TLS for an app.
type Mode string

const (
	ModeHTTP        Mode = "http"        // the gateway terminates TLS and runs the L7 path
	ModePassthrough Mode = "passthrough" // a raw TCP pipe to a host that terminates TLS itself
)

// Status is an app's lifecycle state. Only active apps are served.
type Status string

const (
	StatusActive    Status = "active"
	StatusSuspended Status = "suspended"
	StatusRetired   Status = "retired"
)

// Duration is a time.Duration that reads and writes JSON as "60s".
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "60s" (or a number of seconds). A null leaves d as
// it is, as encoding/json leaves a field of its own types: an optional
// duration sent as null is one left out, not the duration "".
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n float64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err2, &te) && te.Value == "number "+string(b) { // past float64: 1e400
				return fmt.Errorf("duration %s s is out of range", b)
			}
			return fmt.Errorf("duration must be a string like \"60s\"")
		}
		// Past the int64 range the conversion wraps (or saturates, by
		// CPU): 1e10 s read as -2562047h, and the error named that.
		ns := n * float64(time.Second)
		if !(ns > math.MinInt64 && ns < math.MaxInt64) {
			return fmt.Errorf("duration %s s is out of range", b)
		}
		*d = Duration(ns)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		// time.ParseDuration says "invalid" past its range too: a duration
		// that parses with each run of digits made 1 is one, but too long.
		if _, err := time.ParseDuration(digitRuns.ReplaceAllString(s, "1")); err == nil {
			return fmt.Errorf("duration %q is out of range (at most 2562047h)", s)
		}
		return fmt.Errorf("duration %q is not one: write a number and a unit, such as \"60s\", \"1m30s\" or \"500ms\"", s)
	}
	*d = Duration(v)
	return nil
}

var digitRuns = regexp.MustCompile(`[0-9]+`)

// App is one tenant application's settings: the body of
// PUT /api/v3/apps/{app}, as stored in the apps bucket.
type App struct {
	ID        string       `json:"id"`
	Mode      Mode         `json:"mode"`
	Status    Status       `json:"status"`
	CORS      CORS         `json:"cors"`
	RateLimit RateLimit    `json:"rate_limit"`
	Auth      Auth         `json:"auth"`
	Policy    []PolicyRule `json:"policy,omitempty"`
	// Health is the optional active health probe of the app's hosts; nil
	// means passive checks only.
	Health *HealthCheck `json:"health,omitempty"`
}

// CORS is an app's cross-origin allow-list (DESIGN §2 step 5). An empty
// list allows no origin.
type CORS struct {
	Origins          []string `json:"origins"`
	AllowCredentials bool     `json:"allow_credentials,omitempty"`
	// AllowHeaders lists request headers a preflight may ask for; empty,
	// or "*" among them, means the gateway echoes what the browser asked
	// for.
	AllowHeaders []string `json:"allow_headers,omitempty"`
}

// RateLimit is an app's per-client budget. Zero fields take the gateway's
// defaults (600 requests per 60 s).
type RateLimit struct {
	Requests int      `json:"requests"`
	Window   Duration `json:"window"`
}

// Auth says whether the app requires an edge-verified bearer token.
type Auth struct {
	Required bool `json:"required"`
}

// PolicyRule is one ordered allow/deny rule (DESIGN §2 step 8). Path is an
// exact path or a prefix ending in "/*"; empty Methods matches every method.
type PolicyRule struct {
	Action  string   `json:"action"`
	Methods []string `json:"methods,omitempty"`
	Path    string   `json:"path"`
}

// HealthCheck is an app's active probe of each of its hosts.
type HealthCheck struct {
	Path     string   `json:"path"`
	Interval Duration `json:"interval,omitempty"`
}

// Domain maps a custom domain to an app. It routes only once Verified.
type Domain struct {
	Domain   string `json:"domain"`
	App      string `json:"app"`
	Token    string `json:"token"`
	Verified bool   `json:"verified"`
}

// Zone is a DNS zone the gateway serves: {app}.{zone} reaches app {app}.
type Zone struct {
	Name     string   `json:"name"`
	Gateways []string `json:"gateways"`
	TTL      int      `json:"ttl"`
}

// Record is one DNS record set in a zone.
type Record struct {
	Zone   string   `json:"zone"`
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	TTL    int      `json:"ttl"`
	Values []string `json:"values"`
}

// HostKey is a host's enrolment: the Ed25519 key it must prove and the
// apps it may serve (DESIGN §4).
type HostKey struct {
	HostID    string   `json:"host_id"`
	PublicKey string   `json:"public_key"` // std base64 of the raw 32-byte key
	Apps      []string `json:"apps"`
}

// Key identifies a record set: zone, name and type.
func (r *Record) Key() string { return r.Zone + "|" + r.Name + "|" + r.Type }

var labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidLabel reports whether s is one DNS label as DESIGN §1 defines app
// and cluster ids.
func ValidLabel(s string) bool { return labelRE.MatchString(s) }

// ReservedLabel is the label under every zone that reaches the gateway's
// own API; no app may take it.
const ReservedLabel = "api"

// Check reports why r cannot be written (policy.Validate's rule): the API
// refuses such a rule.
func (r PolicyRule) Check() error {
	return policy.Validate([]policy.Rule{policy.Rule(r)})
}

// CheckStored reports why r, stored, cannot be applied as written
// (policy.ValidateStored's rule): the store refuses a value holding such a
// rule. It takes what Check took before the policy layer read more, so an
// app stored then still loads.
func (r PolicyRule) CheckStored() error {
	return policy.ValidateStored([]policy.Rule{policy.Rule(r)})
}
