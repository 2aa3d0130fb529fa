package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	mdns "github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
)

// Options configures a [Server].
type Options struct {
	// Addr is the host:port to serve on, UDP and TCP both. Required.
	Addr string
	// Zones returns the current zones; it is called once per query and must
	// be cheap and safe for concurrent use. Required.
	Zones func() []Zone
	// Logger; nil discards.
	Logger *slog.Logger
}

// Server answers DNS over UDP and TCP on one address.
type Server struct {
	opts Options
	log  *slog.Logger
}

// New validates opts. It binds nothing.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		return nil, errors.New("dns: addr is required")
	}
	if _, _, err := net.SplitHostPort(opts.Addr); err != nil {
		return nil, fmt.Errorf("dns: addr %q: %v", opts.Addr, err)
	}
	if opts.Zones == nil {
		return nil, errors.New("dns: zones source is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log}, nil
}

// ServeDNS answers one query.
func (s *Server) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	resp := Answer(req, s.opts.Zones())
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := mdns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}

// Listen binds UDP and TCP on Addr, so that a port conflict is reported
// before anything else starts. Serve them with [Server.Serve].
func (s *Server) Listen() (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(s.opts.Addr)
	// With port 0 the kernel picks the UDP port, and TCP must get the same
	// one; another process may hold it on TCP, so pick again a few times.
	tries := 1
	if port == "0" {
		tries = 20
	}
	var err error
	for range tries {
		var pc net.PacketConn
		pc, err = net.ListenPacket("udp", s.opts.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns: %w", err)
		}
		var ln net.Listener
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, fmt.Errorf("dns: %w", err)
}

// Serve answers on pc and ln until ctx ends, then shuts both down.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	udp := newServing(&mdns.Server{PacketConn: pc, Handler: s, ReadTimeout: 2 * time.Second})
	tcp := newServing(&mdns.Server{Listener: ln, Handler: s, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }})
	g, ctx := errgroup.WithContext(ctx)
	g.Go(udp.run)
	g.Go(tcp.run)
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(udp.shutdown(sctx), tcp.shutdown(sctx))
	})
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serving is one mdns.Server with its start and end. ShutdownContext on a
// server that has not started yet is refused ("server not started") and
// leaves it to serve forever once it does, so shutdown waits for the start,
// or for a start that failed.
type serving struct {
	srv     *mdns.Server
	started chan struct{} // closed once srv serves
	done    chan struct{} // closed when ActivateAndServe has returned
}

func newServing(srv *mdns.Server) *serving {
	v := &serving{srv: srv, started: make(chan struct{}), done: make(chan struct{})}
	srv.NotifyStartedFunc = func() { close(v.started) }
	return v
}

func (v *serving) run() error {
	defer close(v.done)
	return v.srv.ActivateAndServe()
}

func (v *serving) shutdown(ctx context.Context) error {
	select {
	case <-v.started:
		return v.srv.ShutdownContext(ctx)
	case <-v.done:
		return nil // it never served, or has stopped already
	}
}

// Run is Listen then Serve.
func (s *Server) Run(ctx context.Context) error {
	pc, ln, err := s.Listen()
	if err != nil {
		return err
	}
	s.log.Info("dns listening", "addr", pc.LocalAddr().String())
	return s.Serve(ctx, pc, ln)
}
