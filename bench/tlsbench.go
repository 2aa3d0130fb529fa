//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// tlsResult is one TLS measurement against one target: a passthrough
// download or handshake run, or an L7 new-connection run.
type tlsResult struct {
	round      int   // the round it ran in, from 0 (as wrkResult's)
	bytes      int64 // downloaded (download test)
	handshakes int64 // completed (handshake test; connections in the new-connection test)
	errors     int64
	firstErr   string // the first error, for the report
	version    string // TLS version and key exchange the first connection negotiated (new-connection test)
	elapsed    time.Duration
	cpu        float64 // CPU seconds of the proxy tree over the run
}

func (r tlsResult) mbps() float64 { return float64(r.bytes) / r.elapsed.Seconds() / 1e6 }

// failed returns an error when the run did nothing but fail.
func (r tlsResult) failed() error {
	if r.handshakes == 0 && r.errors > 0 {
		return fmt.Errorf("%d errors, first: %s", r.errors, r.firstErr)
	}
	return nil
}

func (r tlsResult) hps() float64 { return float64(r.handshakes) / r.elapsed.Seconds() }

// countingReader counts bytes into n as they are read.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func tlsClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{ServerName: tlsHost, RootCAs: roots, NextProtos: []string{"http/1.1"}}
}

// runDownload runs streams parallel keep-alive HTTPS downloads of large
// bodies from the backend through addr for d, and counts the bytes.
func runDownload(ctx context.Context, addr string, roots *x509.CertPool, streams int, d time.Duration, p *proc) tlsResult {
	// Errors at or after the deadline are the run ending, not failures:
	// a dial's own deadline can fire just before ctx reports it is done.
	deadline := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	live := func() bool { return ctx.Err() == nil && time.Now().Before(deadline) }
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig:     tlsClientConfig(roots),
		MaxIdleConnsPerHost: streams,
		DisableCompression:  true,
		ReadBufferSize:      256 << 10,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var total, errs atomic.Int64
	var first firstError
	cpu := cpuMeter(p)
	start := time.Now()
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for i := 0; i < 10000 && live(); i++ {
				req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+tlsHost+"/big?mb=1024", nil)
				resp, err := client.Do(req)
				if err != nil {
					if live() {
						errs.Add(1)
						first.set(err)
					}
					continue
				}
				_, err = io.CopyBuffer(io.Discard, countingReader{resp.Body, &total}, buf)
				resp.Body.Close()
				if err != nil && live() {
					errs.Add(1)
					first.set(err)
				}
			}
		}()
	}
	wg.Wait()
	return tlsResult{bytes: total.Load(), errors: errs.Load(), firstErr: first.get(), elapsed: time.Since(start), cpu: cpu()}
}

// runHandshakes opens fresh TLS connections (full handshakes, no session
// resumption) to addr from workers goroutines for d, and counts them.
func runHandshakes(ctx context.Context, addr string, roots *x509.CertPool, workers int, d time.Duration, p *proc) tlsResult {
	cfg := tlsClientConfig(roots)
	return runConnections(ctx, workers, d, p, func(ctx context.Context) error { return handshakeOnce(ctx, addr, cfg) })
}

// runNewConnections is the L7 test for clients that do not keep their
// connections: each connection to addr, a proxy that terminates TLS, is a
// full handshake (SNI appHost, no session resumption, the certificate not
// verified, as wrk does), one GET of path with Connection: close, and the
// whole answer, which must be a 200 of exactly want bytes. With x25519 the
// clients offer only that key exchange (Go's default offers
// X25519MLKEM768 first).
func runNewConnections(ctx context.Context, addr, path string, want, workers int, d time.Duration, x25519 bool, p *proc) tlsResult {
	cfg := &tls.Config{ServerName: appHost, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
	if x25519 {
		cfg.CurvePreferences = []tls.CurveID{tls.X25519}
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + appHost + "\r\nConnection: close\r\n\r\n")
	var version atomic.Value
	r := runConnections(ctx, workers, d, p, func(ctx context.Context) error {
		cs, err := requestOnce(ctx, addr, cfg, req, want)
		if err == nil {
			version.CompareAndSwap(nil, tls.VersionName(cs.Version)+", "+cs.CurveID.String())
		}
		return err
	})
	r.version, _ = version.Load().(string)
	return r
}

// runConnections calls once from workers goroutines for d and counts the
// calls that succeed (as handshakes) and those that fail.
func runConnections(ctx context.Context, workers int, d time.Duration, p *proc, once func(context.Context) error) tlsResult {
	// Errors at or after the deadline are the run ending, not failures:
	// a dial's own deadline can fire just before ctx reports it is done.
	deadline := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	live := func() bool { return ctx.Err() == nil && time.Now().Before(deadline) }
	var done, errs atomic.Int64
	var first firstError
	cpu := cpuMeter(p)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && live(); i++ {
				if err := once(ctx); err != nil {
					if live() {
						errs.Add(1)
						first.set(err)
					}
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return tlsResult{handshakes: done.Load(), errors: errs.Load(), firstErr: first.get(), elapsed: time.Since(start), cpu: cpu()}
}

func handshakeOnce(ctx context.Context, addr string, cfg *tls.Config) error {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(hctx, "tcp", addr)
	if err != nil {
		return err
	}
	if cs := c.(*tls.Conn).ConnectionState(); !cs.HandshakeComplete {
		c.Close()
		return errors.New("handshake incomplete")
	}
	return c.Close()
}

// requestOnce dials addr over TLS, sends req and wants a 200 with a body
// of exactly want bytes before the connection ends. It returns what the
// handshake negotiated.
func requestOnce(ctx context.Context, addr string, cfg *tls.Config, req []byte, want int) (tls.ConnectionState, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(hctx, "tcp", addr)
	if err != nil {
		return tls.ConnectionState{}, fmt.Errorf("handshake: %w", err)
	}
	defer c.Close()
	cs := c.(*tls.Conn).ConnectionState()
	if dl, ok := hctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(req); err != nil {
		return cs, fmt.Errorf("request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return cs, fmt.Errorf("response head: %w", err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, int64(want)+1))
	if err != nil {
		return cs, fmt.Errorf("response body: %w", err)
	}
	if resp.StatusCode != http.StatusOK || n != int64(want) {
		return cs, fmt.Errorf("status %d, %d bytes (want 200, %d)", resp.StatusCode, n, want)
	}
	return cs, nil
}

// firstError keeps the first error it is given. Safe for concurrent use.
type firstError struct {
	mu  sync.Mutex
	err string
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == "" {
		f.err = err.Error()
	}
}

func (f *firstError) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
