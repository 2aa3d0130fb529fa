package bus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// gatewayURL is clientURL with the gateway credential kept in dir.
func gatewayURL(t *testing.T, dir, clientURL string) string {
	t.Helper()
	secret := readSecret(t, dir)
	scheme, rest, _ := strings.Cut(clientURL, "://")
	return scheme + "://" + bus.GatewayUser + ":" + secret + "@" + rest
}

func readSecret(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, bus.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// permErrs connects to url and collects the permission violations the
// server reports to that connection.
type permErrs struct {
	mu   sync.Mutex
	errs []string
}

func (p *permErrs) connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.errs = append(p.errs, err.Error())
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// until returns a context that ends once the server has reported a
// permissions violation for subject, or after 10 s: a request the server
// refuses gets no answer, only that report.
func (p *permErrs) until(ctx context.Context, subject string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for !p.has(subject) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		cancel()
	}()
	return ctx, cancel
}

func (p *permErrs) has(subject string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, `"`+subject+`"`) {
			return true
		}
	}
	return false
}

// A client without credentials may do what the host protocol needs and
// nothing else (DESIGN §3, §4, §7): in particular it cannot write the
// host-key bucket, forge the store's republished changes or announce a
// cluster.
func TestEmbeddedHostPermissions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := startEmbeddedIn(t, dir, "127.0.0.1:0")
	// The gateway's own JetStream calls write through to disk (SyncAlways):
	// a bound of their own, not the client's 5 s default, which a loaded
	// machine's fsync can outlast.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "gatehouse_hostkeys"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "good", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// The gateway sees everything published on the bus.
	watch, err := b.Conn().SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	var pe permErrs
	anon := pe.connect(t, b.ClientURL())

	t.Run("jetstream", func(t *testing.T) {
		js, err := jetstream.New(anon)
		if err != nil {
			t.Fatal(err)
		}
		// Each call waits until the server has refused it (not for a
		// fixed time, all of which the first call used up: the second
		// then failed on an ended context, whatever the server did).
		kctx, cancel := pe.until(ctx, "$JS.API.STREAM.INFO.KV_gatehouse_hostkeys")
		h, err := js.KeyValue(kctx, "gatehouse_hostkeys")
		cancel()
		if err == nil {
			pctx, cancel := pe.until(ctx, "$KV.gatehouse_hostkeys.evil")
			_, err := h.Put(pctx, "evil", []byte("x"))
			cancel()
			if err == nil {
				t.Fatal("anonymous client wrote the host-key bucket")
			}
		}
		actx, cancel := pe.until(ctx, "$JS.API.INFO")
		_, err = js.AccountInfo(actx)
		cancel()
		if err == nil {
			t.Fatal("anonymous client reached the JetStream API")
		}
		if !pe.has("$JS.API.INFO") {
			t.Fatalf("AccountInfo failed with %v, and the server reported no permissions violation", err)
		}
		if _, err := kv.Get(ctx, "evil"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("evil key: %v, want not found", err)
		}
	})

	t.Run("publish", func(t *testing.T) {
		denied := []string{
			"$KV.gatehouse_hostkeys.evil", "$JS.API.STREAM.INFO.KV_gatehouse_hostkeys",
			"gatehouse._store.gatehouse_apps.victim", "gatehouse.clusters",
			"$SYS.REQ.SERVER.PING", "gatehouse.one.hosts.other", "_INBOX.x", "other",
		}
		for _, s := range denied {
			if err := anon.Publish(s, []byte("forged")); err != nil {
				t.Fatal(err)
			}
		}
		allowed := []string{host.AnnounceSubject("one"), host.HeartbeatSubject("one"), host.LeaveSubject("one")}
		for _, s := range allowed {
			if err := anon.Publish(s, []byte("ok")); err != nil {
				t.Fatal(err)
			}
		}
		// One connection's messages arrive in order: a denied one would
		// come before the last allowed one. The gateway's own JetStream
		// traffic and the server's advisories may come in between.
		for seen := 0; seen < len(allowed); {
			m, err := watch.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("waiting for %s: %v", allowed[seen], err)
			}
			switch {
			case string(m.Data) == "forged":
				t.Fatalf("the gateway got a denied publish to %s", m.Subject)
			case string(m.Data) == "ok":
				if m.Subject != allowed[seen] {
					t.Fatalf("got %s, want %s", m.Subject, allowed[seen])
				}
				seen++
			}
		}
		for _, s := range denied {
			if !testutil.Eventually(10*time.Second, func() bool { return pe.has(s) }) {
				t.Errorf("no permissions violation reported for publish to %s", s)
			}
		}
	})

	t.Run("subscribe", func(t *testing.T) {
		denied := []string{">", "$KV.>", "gatehouse.>", "gatehouse.one.hosts.*", "gatehouse._store.>", bus.InboxPrefix + ".>"}
		var subs []*nats.Subscription
		for _, s := range denied {
			sub, err := anon.SubscribeSync(s)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
		inbox := anon.NewInbox()
		reply, err := anon.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		if err := anon.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"$KV.x", "gatehouse.x", "gatehouse.one.hosts.announce", "gatehouse._store.x", bus.InboxPrefix + ".x", inbox} {
			if err := b.Conn().Publish(s, []byte("secret")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reply.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("a host's own inbox: %v", err)
		}
		for i, sub := range subs {
			if n, _, _ := sub.Pending(); n != 0 {
				t.Errorf("anonymous subscription to %s received %d messages", denied[i], n)
			}
			if !testutil.Eventually(10*time.Second, func() bool { return pe.has(denied[i]) }) {
				t.Errorf("no permissions violation reported for subscription to %s", denied[i])
			}
		}
	})

	t.Run("gateway credential", func(t *testing.T) {
		nc := testutil.Connect(t, gatewayURL(t, dir, b.ClientURL()))
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		h, err := js.KeyValue(ctx, "gatehouse_hostkeys")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Put(ctx, "second", []byte("v")); err != nil {
			t.Fatalf("gateway credential cannot write: %v", err)
		}
		sub, err := nc.SubscribeSync("gatehouse._store.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("gatehouse._store.x", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.NextMsg(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		u := strings.Replace(b.ClientURL(), "://", "://"+bus.GatewayUser+":not-the-secret-at-all@", 1)
		if nc, err := nats.Connect(u); err == nil {
			nc.Close()
			t.Fatal("connected with a wrong secret")
		}
	})
}

// The secret is generated once with mode 0600, reused on restart and
// never logged; a readable or malformed file stops the start.
func TestEmbeddedCredentialFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var first string
	for i := range 2 {
		b, err := bus.New(bus.Options{DataDir: dir, Listen: "127.0.0.1:0", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.Close()
		fi, err := os.Stat(filepath.Join(dir, bus.TokenFile))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %04o, want 0600", bus.TokenFile, fi.Mode().Perm())
		}
		s := readSecret(t, dir)
		if i == 0 {
			first = s
		} else if s != first {
			t.Fatal("secret changed across a restart")
		}
	}
	if len(first) < 32 {
		t.Fatalf("secret %d characters long", len(first))
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Contains(out, first) {
		t.Fatalf("the secret was logged:\n%s", out)
	}
	if !strings.Contains(out, filepath.Join(dir, bus.TokenFile)) {
		t.Fatalf("the credential file's path was not logged:\n%s", out)
	}
	if strings.Contains(out, `level=WARN msg="Plaintext`) {
		t.Fatalf("warning an operator can do nothing about:\n%s", out)
	}

	for name, setup := range map[string]func(path string) error{
		"readable by others": func(p string) error { return os.Chmod(p, 0o644) },
		"too short":          func(p string) error { return os.WriteFile(p, []byte("short\n"), 0o600) },
		"not URL-safe":       func(p string) error { return os.WriteFile(p, []byte("0123456789abcdef:@/\n"), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, bus.TokenFile)
			if err := os.WriteFile(path, []byte(first+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := setup(path); err != nil {
				t.Fatal(err)
			}
			b, err := bus.New(bus.Options{DataDir: dir, Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			err = b.Start(t.Context())
			if err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), first) {
				t.Fatalf("Start = %v, want an error naming %s without the secret", err, path)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A URL's user info is accepted, used, and never repeated in ClientURL
// (what hosts are told) or in an error.
func TestExternalCredential(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-s3cret-s3cret"
	for _, u := range []string{"nats://gatehouse:" + secret + "@[::1", "http://gatehouse:" + secret + "@a.example:4222", "nats://" + secret + "@a.example:99999",
		// Without "//" the user info parses as an opaque part.
		"gatehouse:" + secret + "@a.example:4222", "nats:gatehouse:" + secret + "@a.example:4222",
		"nats://a.example:4222,gatehouse:" + secret + "@b.example:4222"} {
		_, err := bus.New(bus.Options{URL: u})
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("New(%q) = %v, want an error without the secret", u, err)
		}
	}

	dir := t.TempDir()
	first := startEmbeddedIn(t, dir, "127.0.0.1:0")
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	second, err := bus.New(bus.Options{URL: gatewayURL(t, dir, first.ClientURL()), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		second.Close()
		mu.Lock()
		defer mu.Unlock()
		if s := readSecret(t, dir); strings.Contains(logs.String(), s) || !strings.Contains(logs.String(), "connected to nats") {
			t.Errorf("the secret was logged, or nothing was:\n%s", logs.String())
		}
	}()
	if err := second.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := second.ClientURL(); got != first.ClientURL() {
		t.Fatalf("ClientURL = %q, want %q without the credential", got, first.ClientURL())
	}
	if _, err := second.JetStream().AccountInfo(t.Context()); err != nil {
		t.Fatal(err)
	}

	wrong, err := bus.New(bus.Options{URL: strings.Replace(first.ClientURL(), "://", "://gatehouse:"+secret+"@", 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if err := wrong.Start(ctx); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("Start with a wrong secret = %v, want an error without the secret", err)
	}
}
