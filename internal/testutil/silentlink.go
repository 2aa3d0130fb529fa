package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// SilentLink is a TCP proxy to target (a bus node) that a test can make
// silent: the connections through it stay open but carry nothing more,
// and new ones are refused, as when the node's machine loses power or a
// partition drops its packets (no FIN, no RST reaches the client). Or
// cut: the connections through it close and new ones are refused, as
// when a partition's routers reset them.
type SilentLink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	silent atomic.Bool
	cut    bool // under mu
	wg     sync.WaitGroup
}

// NewSilentLink starts a link to target on loopback; cleanup closes it.
func NewSilentLink(t testing.TB, target string) *SilentLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &SilentLink{ln: ln, target: target}
	l.wg.Go(l.accept)
	t.Cleanup(func() {
		ln.Close()
		l.mu.Lock()
		for _, c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l
}

// URL is the link's address as a NATS URL.
func (l *SilentLink) URL() string { return "nats://" + l.ln.Addr().String() }

// Quiet makes the link silent and refuses new connections.
func (l *SilentLink) Quiet() {
	l.silent.Store(true)
	l.ln.Close()
}

// Cut closes every connection through the link and refuses new ones.
func (l *SilentLink) Cut() {
	l.silent.Store(true)
	l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for _, c := range l.conns {
		c.Close()
	}
}

func (l *SilentLink) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		if l.cut { // accepted as Cut closed the listener
			l.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		l.wg.Go(func() { l.pipe(out, in) })
		l.wg.Go(func() { l.pipe(in, out) })
	}
}

// pipe copies src to dst until either closes, dropping what it reads
// once the link is silent.
func (l *SilentLink) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
