package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDemoFlags: `gatehouse demo` takes serve's listener flags, so a user
// whose 8080 is taken moves it: the demo answers on the -http address and
// prints that address in what to try, and stops cleanly. demo refused
// every argument ("demo: unexpected argument").
func TestDemoFlags(t *testing.T) {
	httpAddr := testutil.FreeAddr(t)
	mgmt := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "-http", httpAddr, "-https", "127.0.0.1:0",
			"-management", mgmt, "-bus-listen", "127.0.0.1:0", "-dns", "127.0.0.1:0"}, &out, io.Discard)
	}()
	_, port, _ := net.SplitHostPort(httpAddr)
	testutil.WaitFor(t, 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("demo ended: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "curl http://hello.localhost:"+port+"/")
	}, "demo never printed what to try on the -http port")
	if !strings.Contains(out.String(), "http://"+mgmt+"/metrics") {
		t.Errorf("what to try lacks the -management address %s:\n%s", mgmt, out.String())
	}
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/", nil)
	req.Host = "hello.localhost"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(string(b), "hello from host-") {
		t.Errorf("hello.localhost on -http: %d %q", res.StatusCode, b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo after stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop")
	}
}

// TestDemoPortTaken: a demo port another program holds stops the demo
// with one line naming the flag that moves it, not a config key the demo
// cannot set ("config: http.addr: ... address already in use").
func TestDemoPortTaken(t *testing.T) {
	for _, flag := range []string{"-http", "-https", "-management", "-bus-listen"} {
		t.Run(flag, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			args := map[string]string{"-http": "127.0.0.1:0", "-https": "127.0.0.1:0", "-management": "127.0.0.1:0", "-bus-listen": "127.0.0.1:0", "-dns": "127.0.0.1:0"}
			args[flag] = taken.Addr().String()
			argv := []string{"demo"}
			for f, v := range args {
				argv = append(argv, f, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = run(ctx, argv, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("demo succeeded on a taken port")
			}
			msg := err.Error()
			if !strings.Contains(msg, "choose another address with "+flag) || !strings.Contains(msg, taken.Addr().String()) ||
				strings.Contains(msg, "config:") || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming %s and %s", msg, taken.Addr(), flag)
			}
			if exitCode(err, &bytes.Buffer{}) != 1 {
				t.Error("exit code not 1")
			}
		})
	}
}

// TestDemoSameAddressTwice: two demo flags given one address stop the demo
// with one line naming both flags. The demo took the second for taken by
// another program and named a config key the demo cannot set
// ("config: http.addr: listen tcp ...: address already in use").
func TestDemoSameAddressTwice(t *testing.T) {
	addr := testutil.FreeAddr(t) // free: only the demo's own two listeners would clash
	tests := []struct{ a, b string }{
		{"-http", "-management"},
		{"-https", "-bus-listen"},
		{"-dns", "-http"},
	}
	for _, tt := range tests {
		t.Run(tt.a+tt.b, func(t *testing.T) {
			args := map[string]string{"-http": "127.0.0.1:0", "-https": "127.0.0.1:0", "-management": "127.0.0.1:0", "-bus-listen": "127.0.0.1:0", "-dns": "127.0.0.1:0"}
			args[tt.a], args[tt.b] = addr, addr
			argv := []string{"demo"}
			for f, v := range args {
				argv = append(argv, f, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, argv, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("demo succeeded with one address for two listeners")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.a) || !strings.Contains(msg, tt.b) || !strings.Contains(msg, addr) ||
				strings.Contains(msg, "config:") || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming %s, %s and %s", msg, tt.a, tt.b, addr)
			}
		})
	}
}

// TestDemoSamePortSpelledTwice: one port given to two demo flags in two
// spellings (localhost and 127.0.0.1, or every interface and loopback)
// is the same clash as one address given twice, and says so naming both
// flags. The second listener failed to bind and the line named a config
// key the demo has no flag for ("config: https.addr: listen tcp
// 127.0.0.1:P: bind: address already in use").
func TestDemoSamePortSpelledTwice(t *testing.T) {
	port := strconv.Itoa(testutil.FreePort(t)) // free: only the demo's own two listeners would clash
	tests := []struct{ a, addrA, b, addrB string }{
		{"-http", "127.0.0.1:" + port, "-https", "localhost:" + port},
		{"-management", ":" + port, "-bus-listen", "127.0.0.1:" + port},
		{"-http", "LOCALHOST:" + port, "-dns", "0.0.0.0:" + port},
	}
	for _, tt := range tests {
		t.Run(tt.a+tt.b, func(t *testing.T) {
			args := map[string]string{"-http": "127.0.0.1:0", "-https": "127.0.0.1:0", "-management": "127.0.0.1:0", "-bus-listen": "127.0.0.1:0", "-dns": "127.0.0.1:0"}
			args[tt.a], args[tt.b] = tt.addrA, tt.addrB
			argv := []string{"demo"}
			for f, v := range args {
				argv = append(argv, f, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, argv, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("demo succeeded with one port for two listeners")
			}
			want := fmt.Sprintf("demo: %s %s and %s %s are one port: give each its own port", tt.a, tt.addrA, tt.b, tt.addrB)
			if alt := fmt.Sprintf("demo: %s %s and %s %s are one port: give each its own port", tt.b, tt.addrB, tt.a, tt.addrA); err.Error() != want && err.Error() != alt {
				t.Errorf("error %q\nwant %q", err, want)
			}
		})
	}
}
