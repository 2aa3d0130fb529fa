// Package edge owns gatehouse's listeners (DESIGN §3): management (bound
// first; /readyz lives here), http and https, their accept loops and
// per-connection goroutines, the active_connections count, and graceful
// drain.
//
// A connection on the https listener goes: accept → sni.Peek (the
// ClientHello is read, not consumed) → for an app in passthrough mode,
// pipe.Join to a verified tls host (the raw TCP conns, so Linux splices) →
// otherwise TLS is terminated with the *tls.Config given (GetCertificate
// from tlsmgr) and the connection is handed to an http.Server running the
// L7 handler (HTTP/1.1 or HTTP/2 by ALPN) through a channel listener. A
// hello without SNI or with an unknown name never opens a pipe.
//
// The http listener answers /.well-known/acme-challenge/* first (the ACME
// option), then redirects to https (308), answers 404 (acme-only) or serves
// the L7 handler, per Options.HTTPMode.
//
// Edge imports neither gateway nor tlsmgr: it receives an http.Handler and
// a *tls.Config as values. Wiring, in internal/gatehouse:
//
//	certs, _ := tlsmgr.New(tlsmgr.Options{Names: ..., Directory: ..., Storage: st.Certs(), ...})
//	e, _ := edge.New(edge.Options{
//		HTTPAddr: ":80", HTTPSAddr: ":443", ManagementAddr: "127.0.0.1:9180",
//		HTTPMode: cfg.HTTPMode, Handler: gw, Management: mgmtMux,
//		TLS: certs.TLSConfig(), ACME: certs.HTTPHandler,
//		Passthrough: edge.RoutePassthrough(live, nil),
//		ActiveConns: activeConnectionsGauge, Ready: storeSynced,
//	})
//	e.ListenManagement() // first, before anything else starts
//	e.Listen()           // http, https
//	// a part that fails to start before Run: e.Close() frees the ports
//	// errgroup: e.Run(ctx), certs.Run(ctx) (after Listen, so challenges are answered), ...
package edge
