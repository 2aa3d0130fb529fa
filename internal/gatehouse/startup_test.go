package gatehouse

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDNSBusyClosesListeners: when dns.addr is taken, over UDP or over
// TCP, Run fails with an error naming that address, and the management,
// http and https listeners it had bound before are closed again, so a
// process embedding the gateway gets its ports back.
func TestDNSBusyClosesListeners(t *testing.T) {
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			busy := occupy(t, network)
			cfg := testConfig(t)
			cfg.DNS.Addr = busy
			cfg.Management.Addr, cfg.HTTP.Addr, cfg.HTTPS.Addr = testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
			g, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = g.Run(ctx)
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "listen "+network+" "+busy) {
				t.Fatalf("Run = %v, want address in use naming %s %s", err, network, busy)
			}
			for key, addr := range map[string]string{
				"management.addr": cfg.Management.Addr, "http.addr": cfg.HTTP.Addr, "https.addr": cfg.HTTPS.Addr,
			} {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("%s %s still bound after Run failed: %v", key, addr, err)
					continue
				}
				ln.Close()
			}
		})
	}
}

// occupy holds a port on 127.0.0.1 over network ("udp" or "tcp") until t
// ends, and returns its address. For "tcp" the same UDP port is free, so
// the DNS server's UDP bind succeeds and its TCP bind is the one refused.
func occupy(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		return pc.LocalAddr().String()
	}
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil { // the UDP port is someone else's: pick again
			ln.Close()
			continue
		}
		pc.Close()
		t.Cleanup(func() { ln.Close() })
		return addr
	}
	t.Fatal("no TCP port on 127.0.0.1 with its UDP port free")
	return ""
}
