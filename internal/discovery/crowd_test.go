package discovery_test

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A host that announces before its operator enrols it is forgotten as soon
// as the enrolment lookup refuses it, not kept until host_ttl (anyone on
// the bus can announce made-up ids), and still gets in once enrolled: each
// heartbeat of a host the gateway does not know is answered "announce",
// and it announces again.
func TestHostEnrolledAfterItsFirstAnnounce(t *testing.T) {
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.HostTTL = time.Minute })
	k, pub := newKey(t)
	runHost(t, hostURL, "web-1", k, []string{"hello"})

	// Refused, forgotten, asked to announce, refused again.
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("unenrolled") >= 2 }, "not refused twice")
	tu.WaitFor(t, 5*time.Second, func() bool { _, ok := e.d.Host("web-1"); return !ok }, "a refused host is still tracked")
	if n := e.hostsIn(route.HostProvisional); n > 1 {
		t.Fatalf("hosts{provisional} = %v for one host", n)
	}

	e.keys.enrol("web-1", pub, "hello")
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable once enrolled")
	if hi := e.info("web-1"); hi.State != route.HostVerified || hi.LastError != "" {
		t.Fatalf("info %+v", hi)
	}
}
