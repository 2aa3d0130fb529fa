package proxy

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loopPool is a fastPool whose dials, to any address, reach one loopback
// listener, on a clock the test moves; it counts the connections it
// opened and those closed.
type loopPool struct {
	*fastPool
	clock          atomic.Int64
	opened, closed atomic.Int64
}

type countedConn struct {
	net.Conn
	once   sync.Once
	closed *atomic.Int64
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.closed.Add(1) })
	return c.Conn.Close()
}

func newLoopPool(t *testing.T, idleFor time.Duration) *loopPool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	lp := &loopPool{}
	lp.clock.Store(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	var d net.Dialer
	lp.fastPool = &fastPool{
		dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
			if err != nil {
				return nil, err
			}
			lp.opened.Add(1)
			return &countedConn{Conn: c, closed: &lp.closed}, nil
		},
		now: lp.now, max: 4, idleFor: idleFor,
	}
	t.Cleanup(func() { lp.closeIdle(true) })
	return lp
}

func (lp *loopPool) now() time.Time          { return time.Unix(0, lp.clock.Load()) }
func (lp *loopPool) advance(d time.Duration) { lp.clock.Add(int64(d)) }
func (lp *loopPool) entries() (n int) {
	lp.hosts.Range(func(_, _ any) bool { n++; return true })
	return n
}

// TestFastPoolDropsGoneHosts: the pool holds no entry for a host address
// whose connections have all been idle for idleFor and that no request
// asked for since, however many addresses came and went; a connection
// out while its address's entry is dropped goes back to a new one and is
// reused from there, and none is left open outside the pool, with gets
// and puts racing the sweeps that drop entries too.
func TestFastPoolDropsGoneHosts(t *testing.T) {
	const idleFor = time.Hour // no timer sweep while the test runs: it sweeps itself
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, lp *loopPool)
	}{
		{"a thousand addresses used once", func(t *testing.T, lp *loopPool) {
			for i := range 1000 {
				c, err := lp.get(ctx, "10.0.0."+strconv.Itoa(i%250)+":"+strconv.Itoa(8000+i/250), lp.now(), false)
				if err != nil {
					t.Fatal(err)
				}
				c.br.Reset(nil) // nothing buffered: put keeps it
				lp.put(c, lp.now())
			}
			if n := lp.entries(); n != 1000 {
				t.Fatalf("entries before the sweep = %d, want 1000", n)
			}
			lp.advance(idleFor)
			lp.sweepIdle()
			if n := lp.entries(); n != 0 {
				t.Errorf("entries after the sweep = %d, want 0", n)
			}
			if o, c := lp.opened.Load(), lp.closed.Load(); o != 1000 || c != 1000 {
				t.Errorf("opened %d, closed %d: want every idle connection closed", o, c)
			}
		}},
		{"a connection out across the drop", func(t *testing.T, lp *loopPool) {
			const addr = "10.1.1.1:80"
			c, err := lp.get(ctx, addr, lp.now(), false)
			if err != nil {
				t.Fatal(err)
			}
			lp.advance(idleFor) // a long stream
			lp.sweepIdle()
			if n := lp.entries(); n != 0 {
				t.Fatalf("entries with the one connection out = %d, want 0", n)
			}
			c.br.Reset(nil)
			lp.put(c, lp.now())
			if n := lp.entries(); n != 1 {
				t.Fatalf("entries after the put = %d, want 1", n)
			}
			again, err := lp.get(ctx, addr, lp.now(), false)
			if err != nil {
				t.Fatal(err)
			}
			if again != c || lp.opened.Load() != 1 {
				t.Errorf("the connection put back was not reused (dials: %d)", lp.opened.Load())
			}
			again.br.Reset(nil)
			lp.put(again, lp.now())
		}},
		{"an address asked for within idleFor stays", func(t *testing.T, lp *loopPool) {
			const addr = "10.1.1.2:80"
			c, err := lp.get(ctx, addr, lp.now(), false)
			if err != nil {
				t.Fatal(err)
			}
			lp.advance(idleFor / 2)
			lp.sweepIdle()
			if n := lp.entries(); n != 1 {
				t.Errorf("entries a half idleFor after a get = %d, want 1", n)
			}
			c.br.Reset(nil)
			lp.put(c, lp.now())
		}},
		{"gets and puts racing sweeps", func(t *testing.T, lp *loopPool) {
			ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						c, err := lp.get(ctx, "10.2.0."+strconv.Itoa((w+i)%3)+":80", lp.now(), false)
						if err != nil {
							continue
						}
						c.br.Reset(nil)
						lp.put(c, lp.now())
					}
				})
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					lp.advance(idleFor) // every stack is old and untouched
					lp.sweepIdle()
				}
			})
			wg.Wait()
			lp.advance(idleFor)
			lp.sweepIdle()
			if n := lp.entries(); n != 0 {
				t.Errorf("entries after the last sweep = %d, want 0", n)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp := newLoopPool(t, idleFor)
			tt.run(t, lp)
			lp.closeIdle(true)
			if o, c := lp.opened.Load(), lp.closed.Load(); o != c {
				t.Errorf("opened %d connections, closed %d after the pool closed: %d leaked", o, c, o-c)
			}
		})
	}
}
