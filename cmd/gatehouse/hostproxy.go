package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/logcut"
)

// sidecarProxy forwards to up, keeping the Host the gateway sent (the
// app's own name) and the gateway's X-Forwarded-* and X-Gatehouse-*
// headers as they are.
func sidecarProxy(up *url.URL, scheme string, logger *slog.Logger) http.Handler {
	return sidecarProxyTrusting(up, scheme, nil, logger)
}

// sidecarProxyTrusting is sidecarProxy checking an https upstream's
// certificate against roots; nil: the system roots, which are the
// sidecar's (it has no CA flag; tests give their own CA).
func sidecarProxyTrusting(up *url.URL, scheme string, roots *x509.CertPool, logger *slog.Logger) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	h2c := scheme == host.SchemeH2C && up.Scheme == "http"
	// The connections note the names each answer's Connection lists
	// (hostconnfields.go), an https one's over its TLS, whose handshake
	// the transport then leaves to DialTLSContext. Not h2c's: HTTP/2 has
	// no Connection field.
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second} // http.DefaultTransport's
	if !h2c {
		tr.DialContext = namesDial(d.DialContext)
	}
	tr.DialTLSContext = namesDialTLS(d.DialContext, &tls.Config{RootCAs: roots}, tr.TLSHandshakeTimeout)
	// A bound on the app's head, for the connections' reading of it: the
	// gateway refuses a longer head from a host anyway.
	tr.MaxResponseHeaderBytes = maxAppHead
	// Otherwise the transport asks the app for gzip the client never
	// asked for, and undoes it: the app sees a field the client did not
	// send, and the response loses its Content-Length.
	tr.DisableCompression = true
	// The gateway sends this one upstream many requests at once and keeps
	// up to 64 idle connections per host (docs/config.md, cluster.deadline);
	// net/http's default keeps 2, and a connection to the app was opened
	// and closed for nearly every request of a burst.
	tr.MaxIdleConnsPerHost = 64
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	// A Via of this process's own marks what it forwards (RFC 9110
	// §7.6.3: Via is how a proxy finds a loop), so a request that comes
	// back is answered 508 rather than forwarded again: -upstream may
	// reach the sidecar by a name or a port forward that selfLoop cannot
	// see at start. Via, not a field of gatehouse's, as the gateway strips
	// those from what it proxies: a -upstream that leads back through a
	// gateway (the app's public name) is a loop too. The pseudonym is
	// random, so a chain of sidecars is no loop.
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand)
	via := "gatehouse-host-" + hex.EncodeToString(nonce[:])
	var rt http.RoundTripper = tr
	if !h2c {
		rt = connNamesTransport{tr}
	}
	rp := &httputil.ReverseProxy{
		Transport:      rt,
		ModifyResponse: checkAnswer,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Add("Via", viaProto(pr.In)+" "+via)
			// Rewrite strips these from Out; the gateway's values are the
			// ones the app must see.
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
			// ReverseProxy gives Out a copy of the declared names, which
			// net/http fills on In as the body ends: sharing In's map
			// passes on the values the client sent.
			if pr.In.Trailer != nil {
				pr.Out.Trailer = pr.In.Trailer
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if stalled(r) {
				// The client's upload stopped coming for the stall
				// bound: its 408, as the gateway answers one, not the
				// app's failure. First, as net/http cancels an HTTP/1
				// request whose body's deadline fired, and taken for
				// the client leaving it got net/http's empty 200. Where
				// its next request would start is unknown: none is read.
				if r.ProtoMajor == 1 {
					w.Header().Set("Connection", "close")
				}
				writeProblem(w, http.StatusRequestTimeout, `{"type":"about:blank","title":"Request Timeout","status":408,"detail":"the request body stopped coming"}`)
				return
			}
			if errors.Is(err, context.Canceled) {
				return
			}
			err = explainTLS("the upstream's", err)
			if h2c && (strings.Contains(err.Error(), "frame too large") || strings.Contains(err.Error(), "client conn could not be established")) {
				// What an HTTP/1 answer to the HTTP/2 preface reads as
				// (its "HTTP/1.x" taken for a frame's length): the app
				// is up, and speaks another protocol. A request that
				// finds the connection's handshake already failed so
				// gets x/net's "client conn could not be established".
				err = fmt.Errorf("%w (the upstream does not speak h2c: -scheme h2c speaks HTTP/2 cleartext to an http:// -upstream; for an HTTP/1.1 app give -scheme http)", err)
			}
			logger.Warn("host: upstream failed", "err", err, "path", logcut.Path(r.URL.Path))
			writeProblem(w, http.StatusBadGateway, `{"type":"about:blank","title":"Bad Gateway","status":502,"detail":"the app behind this host did not answer"}`)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if viaNames(r.Header["Via"], via) {
			logger.Warn("host: a request came back to this sidecar: -upstream leads back to it", "upstream", up.String(), "path", logcut.Path(r.URL.Path))
			writeProblem(w, http.StatusLoopDetected, `{"type":"about:blank","title":"Loop Detected","status":508,"detail":"the request came back to the sidecar that forwarded it: its -upstream leads back to it"}`)
			return
		}
		if r.ProtoMajor == 1 && r.ContentLength != 0 {
			// The upload goes on to the app while its answer comes
			// back: net/http's HTTP/1 server otherwise reads and throws
			// away up to 256 KiB of what is left of the body as the
			// answer's head goes out, bytes the app never got (a gap in
			// a chunked upload, the end of one of known length and the
			// app's request cut with it). What the app leaves unread
			// net/http still reads (up to 256 KiB) after the handler,
			// under the stall bound (stallBody.rearm), to reuse the
			// connection.
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
		rp.ServeHTTP(answerWriter{w}, r)
	})
}

// answerWriter cleans what ReverseProxy writes of the app's answers
// before the final one reaches net/http. Unwrap keeps Flush and Hijack
// (a 101's tunnel) reachable for http.ResponseController.
type answerWriter struct{ http.ResponseWriter }

func (w answerWriter) WriteHeader(code int) {
	h := w.Header()
	switch {
	case code < 200 && code != http.StatusSwitchingProtocols:
		// ReverseProxy removes the hop-by-hop fields from the final
		// answer only; an interim one's are the app's connection's as
		// much (RFC 9110 §7.6.1).
		dropHopByHop(h, false)
	case code >= 200:
		// A body the app sent untyped stays so: net/http would sniff
		// one (text/html for an upload served with nosniff). Set here,
		// not before the proxy runs: ReverseProxy clears the header
		// map after each 1xx it passes on.
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// checkAnswer is the sidecar's ReverseProxy.ModifyResponse.
func checkAnswer(res *http.Response) error {
	if res.StatusCode < 100 || res.StatusCode > 599 {
		// No HTTP status (RFC 9110 §15): net/http's client takes any
		// three digits, and ReverseProxy writing one under 100 panics,
		// closing the gateway's connection unanswered.
		return fmt.Errorf("the app answered status %03d, which is no HTTP status (100-599)", res.StatusCode)
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// ReverseProxy writes a 101 with every field the app sent, its
		// connection's (Keep-Alive, Proxy-*, what its Connection names)
		// included.
		dropHopByHop(res.Header, true)
	}
	return nil
}

// hopByHop are the fields ReverseProxy removes from a final answer as
// hop-by-hop (RFC 9110 §7.6.1), in canonical form.
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// dropHopByHop removes the app's hop-by-hop fields from h: the ones its
// Connection names, and hopByHop. With upgrade (a 101) it keeps what the
// tunnel starts with: Upgrade, and Connection naming it alone when it
// named it. (The gateway's internal/proxy does the same; the binary may
// not import it, STYLE §6.1.)
func dropHopByHop(h http.Header, upgrade bool) {
	named := false
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			switch tok = textproto.TrimString(tok); {
			case tok == "":
			case upgrade && strings.EqualFold(tok, "upgrade"):
				named = true
			default:
				delete(h, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
	for _, k := range hopByHop {
		if !upgrade || k != "Upgrade" {
			delete(h, k)
		}
	}
	if named {
		h["Connection"] = []string{"Upgrade"}
	}
}

// writeProblem answers status with body, an RFC 9457 problem: the
// gateway's own answers are such bodies (STYLE §6.1 keeps
// internal/problem out of the binary).
func writeProblem(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// viaProto is r's protocol as a Via names it ("1.1", "2").
func viaProto(r *http.Request) string {
	if r.ProtoMajor >= 2 {
		return strconv.Itoa(r.ProtoMajor)
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// viaNames reports whether a hop of the Via field values vs was received
// by pseudonym.
func viaNames(vs []string, pseudonym string) bool {
	for _, v := range vs {
		for hop := range strings.SplitSeq(v, ",") {
			// protocol, received-by, then an optional comment
			if f := strings.Fields(hop); len(f) >= 2 && f[1] == pseudonym {
				return true
			}
		}
	}
	return false
}
