//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// idleResult is the memory a target holds for n idle keep-alive client
// connections: each connection made one request, read the answer and
// then sat idle, as a browser's would.
type idleResult struct {
	n              int
	before, after  int64 // RSS of the proxy process tree, bytes
	perConn        float64
	openedFailures int
}

// measureIdle opens n connections to addr, one request each, measures the
// RSS growth of p's tree, and closes them all again.
func measureIdle(ctx context.Context, addr string, p *proc, n int) (idleResult, error) {
	r := idleResult{n: n, before: rssBytes(p.pid())}
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var next, failed atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				c, err := openIdle(ctx, addr)
				if err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	r.openedFailures = int(failed.Load())
	if r.openedFailures > n/100 {
		return r, fmt.Errorf("%d of %d idle connections failed: %v", r.openedFailures, n, firstErr)
	}
	// Let the proxy settle (its per-connection buffers released to the
	// idle state) before reading its size.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	r.after = rssBytes(p.pid())
	r.perConn = float64(r.after-r.before) / float64(n-r.openedFailures)
	return r, nil
}

func openIdle(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: " + appHost + "\r\n\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 2048)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 2*smallBody))
	n := len(b)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != smallBody {
		c.Close()
		return nil, fmt.Errorf("idle setup: status %d, %d bytes", resp.StatusCode, n)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
