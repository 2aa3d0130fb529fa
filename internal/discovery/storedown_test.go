package discovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestStoreDownKeepsVerifiedHost: with the bus connected but JetStream
// unable to answer (disabled on a full disk, no quorum, a timed-out
// call), an enrolment lookup says nothing about the host, as while the
// bus is down. A check then (a re-announce, reverify_interval, "check
// again") must keep the verified host routed, not count it unenrolled
// and take it out of the pool; a new host must stay to be checked again,
// not be forgotten.
func TestStoreDownKeepsVerifiedHost(t *testing.T) {
	t.Parallel()
	ns := tu.StartBus(t)
	js, err := jetstream.New(tu.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, ns.ClientURL(), func(o *discovery.Options) {
		o.Keys = st
		o.KeysUnavailable = store.Unavailable
		quiet(o)
		// A disabled JetStream answers no lookup: a check's lookup fails
		// only when VerifyTimeout ends it, which must come within the
		// watch below for the test to see what the check made of that.
		o.VerifyTimeout = time.Second
	})
	k, pub := newKey(t)
	if err := st.PutHostKey(t.Context(), &route.HostKey{HostID: "web-1", PublicKey: host.PublicKeyString(pub), Apps: []string{"hello"}}); err != nil {
		t.Fatal(err)
	}
	k2, pub2 := newKey(t)
	if err := st.PutHostKey(t.Context(), &route.HostKey{HostID: "web-2", PublicKey: host.PublicKeyString(pub2), Apps: []string{"hello"}}); err != nil {
		t.Fatal(err)
	}
	runHost(t, ns.ClientURL(), "web-1", k, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")

	ns.DisableJetStream()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // nats.go's 5 s otherwise
	defer cancel()
	if _, err := st.GetHostKey(ctx, "web-1"); !store.Unavailable(err) {
		t.Fatalf("with JetStream disabled, a lookup: %v; want an unavailable store", err)
	}
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	cs := newChallengeServer(t, "web-2", k2)
	e.publish(host.KindAnnounce, announce("web-2", cs.addr, pub2, "hello"))
	e.handled(e.nc)
	out, forgot := false, false
	// Twice VerifyTimeout: the checks' lookups have failed by then.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !(out && forgot); time.Sleep(hbEvery / 10) {
		out = out || !e.routable("hello", "web-1")
		_, known := e.d.Host("web-2")
		forgot = forgot || !known
	}
	if out {
		t.Errorf("verified host taken out while the store could not answer: %+v", e.info("web-1"))
	}
	if forgot {
		t.Error("new host forgotten as unenrolled while the store could not answer")
	}
	if n := e.failures("unenrolled"); n != 0 {
		t.Fatalf("%v checks counted unenrolled while the store could not answer", n)
	}
}
