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
	udp := &mdns.Server{PacketConn: pc, Handler: s, ReadTimeout: 2 * time.Second}
	tcp := &mdns.Server{Listener: ln, Handler: s, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(udp.ActivateAndServe)
	g.Go(tcp.ActivateAndServe)
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(udp.ShutdownContext(sctx), tcp.ShutdownContext(sctx))
	})
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
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
