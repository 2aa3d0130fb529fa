package edge

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A passthrough host is dialed at its Dial address, the one that passed
// its challenge, never at what the name in its Addr resolves to now
// ("localhost", 127.0.0.1 here: where a rebound name would send the
// app's clients).
func TestPassthroughDialsThePinnedAddress(t *testing.T) {
	lnName, lnPin, port := testutil.ListenTwin(t)
	accepted := func(ln net.Listener) chan net.Conn {
		ch := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					close(ch)
					return
				}
				ch <- c
			}
		}()
		return ch
	}
	atName, atPin := accepted(lnName), accepted(lnPin)

	live := table("localhost:" + port)
	h := *live.Load().Hosts()[0]
	h.Dial = "127.0.0.2:" + port
	b := route.NewBuilder(live)
	b.Replace(route.State{
		Zones: []*route.Zone{{Name: zone}},
		Apps:  []*route.App{{ID: "secure", Mode: route.ModePassthrough, Status: route.StatusActive}},
	})
	b.SetHost(&h)
	dial, ok := RoutePassthrough(live, nil)("secure." + zone)
	if !ok {
		t.Fatal("passthrough app not routed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		c, _, err := dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.RemoteAddr().String(); got != h.Dial {
			t.Fatalf("dialed %s, want the pinned %s", got, h.Dial)
		}
		c.Close()
		select {
		case sc := <-atPin:
			sc.Close()
		case <-time.After(5 * time.Second):
			t.Fatal("the pinned address accepted nothing")
		}
	}
	select {
	case c := <-atName:
		c.Close()
		t.Fatal("the address the name resolves to got a connection")
	case <-time.After(50 * time.Millisecond):
	}
}
