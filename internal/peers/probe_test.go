package peers

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestHungPeerTurnsInactiveWhileAnnouncing: a peer gateway that accepts
// connections but never answers, while its cluster keeps announcing on
// the shared bus. Its probes miss three times in a row and it turns
// inactive, whether the static list names it or only its announcements
// do, and it is back once it answers again. It used to stay active for as
// long as it announced (a static member), or was never probed at all (an
// announced one), and every forward to it waited out cluster.deadline.
func TestHungPeerTurnsInactiveWhileAnnouncing(t *testing.T) {
	for _, static := range []bool{true, false} {
		name := map[bool]string{true: "static", false: "announced only"}[static]
		t.Run(name, func(t *testing.T) {
			const interval = 50 * time.Millisecond
			ns := testutil.StartBus(t)
			usKey := newKey(t)
			us := startHealthz(t, "us")
			o := Options{
				Self:             cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"},
				Key:              newKey(t),
				Conn:             testutil.Connect(t, ns.ClientURL()),
				ProbeInterval:    interval,
				ProbeTimeout:     4 * interval,
				AnnounceInterval: interval,
			}
			if static {
				o.Static = []cluster.Peer{{ID: "us", URL: us.srv.URL, PublicKey: pubOf(usKey)}}
			}
			p, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			run(t, p)
			// us announces itself every half interval until the test ends.
			nc := testutil.Connect(t, ns.ClientURL())
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			wg.Go(func() {
				tk := time.NewTicker(interval / 2)
				defer tk.Stop()
				for {
					b, _ := json.Marshal(cluster.Announce(usKey, "us", us.srv.URL, time.Now()))
					_ = nc.Publish(cluster.Subject, b)
					select {
					case <-ctx.Done():
						return
					case <-tk.C:
					}
				}
			})
			testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "us") }, "us never turned active")

			us.hang.Store(true)
			start := time.Now()
			testutil.WaitFor(t, 5*time.Second, func() bool { return !active(p, "us") }, "a hung peer stayed active while it announced")
			t.Logf("hung peer inactive after %s = %.1f probe intervals", time.Since(start).Round(time.Millisecond), float64(time.Since(start))/float64(interval))
			// Announcements go on: it stays out while it hangs.
			time.Sleep(6 * interval)
			if active(p, "us") {
				t.Fatal("a hung peer came back while it still hung")
			}

			us.hang.Store(false)
			testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "us") }, "a peer that answers again did not come back")
		})
	}
}

// TestProbeChecksIdentity: a probe counts only when the peer's /healthz
// answers 200 as that peer (X-Gatehouse-Cluster): a `clusters:` entry whose
// URL reaches another cluster's gateway, or this one's, or something that
// is no gateway, or redirects elsewhere, never makes the peer active. The
// wrong cluster is logged, once however many probes miss.
func TestProbeChecksIdentity(t *testing.T) {
	good := startHealthz(t, "us")
	tests := []struct {
		name     string
		answer   http.HandlerFunc
		active   bool
		wrongLog bool // "peer answered as another cluster" logged
	}{
		{"the peer itself", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(cluster.HeaderCluster, "us")
			io.WriteString(w, "ok")
		}, true, false},
		{"another cluster's gateway", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(cluster.HeaderCluster, "ap")
			io.WriteString(w, "ok")
		}, false, true},
		{"this cluster's own gateway", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(cluster.HeaderCluster, "eu")
			io.WriteString(w, "ok")
		}, false, true},
		{"no gateway at all", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		}, false, true},
		{"a redirect to the peer", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, good.srv.URL+"/healthz", http.StatusFound)
		}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				tt.answer(w, r)
			}))
			t.Cleanup(srv.Close)
			var logs logBuf
			p, err := New(Options{
				Self:          cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"},
				Key:           newKey(t),
				Static:        []cluster.Peer{{ID: "us", URL: srv.URL, PublicKey: pubOf(newKey(t))}},
				ProbeInterval: 30 * time.Millisecond,
				ProbeTimeout:  time.Second,
				Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, p)
			if tt.active {
				testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "us") }, "the right peer never turned active")
			} else {
				testutil.WaitFor(t, 5*time.Second, func() bool { return hits.Load() >= 5 }, "too few probes")
				if active(p, "us") {
					t.Fatal("active on probes that did not reach the peer")
				}
			}
			stop()
			if n := strings.Count(logs.String(), `msg="peers: peer answered as another cluster`); (n == 1) != tt.wrongLog || n > 1 {
				t.Fatalf("%d lines saying the peer answered as another cluster:\n%s", n, logs.String())
			}
		})
	}
}

// TestProbeOfUntrustedPeerSaysHowToTrustIt: a peer whose certificate a
// private CA signed, which this gateway's roots do not hold, never turns
// active, and the warning that says so carries the reason and the way out
// (SSL_CERT_FILE, SSL_CERT_DIR: gatehouse has no CA setting), as a
// forward to that peer's does; it had x509's bare error alone.
func TestProbeOfUntrustedPeerSaysHowToTrustIt(t *testing.T) {
	cert, _ := testutil.PrivateCA(t, "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(cluster.HeaderCluster, "us")
		io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var logs logBuf
	p, err := New(Options{
		Self:          cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"},
		Key:           newKey(t),
		Static:        []cluster.Peer{{ID: "us", URL: srv.URL, PublicKey: pubOf(newKey(t))}},
		ProbeInterval: 20 * time.Millisecond,
		ProbeTimeout:  time.Second,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, p)
	var line string
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, `msg="peers: cluster inactive`) {
				line = l
				return true
			}
		}
		return false
	}, "the peer's failed probes were never warned of")
	stop()
	if active(p, "us") {
		t.Error("a peer whose certificate is not trusted is active")
	}
	for _, want := range []string{"cluster=us", "certificate signed by unknown authority", "the peer cluster's certificate is not signed by a CA this process trusts", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if !strings.Contains(line, want) {
			t.Errorf("the warning lacks %q:\n%s", want, line)
		}
	}
}
