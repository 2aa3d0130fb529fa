package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// DefaultListen is where the embedded server listens when Options.Listen
// is empty (DESIGN §3).
const DefaultListen = "127.0.0.1:4222"

// Options configure a [Bus].
type Options struct {
	// URL is one or several NATS URLs, comma separated
	// ("nats://a:4222,nats://b:4222"). Empty means: start an embedded
	// server. Schemes nats and tls are accepted (a missing port means
	// 4222), or ws and wss for NATS over WebSocket; one list does not mix
	// the two kinds, which the client cannot do. A URL may carry user
	// info (nats://user:password@host:port), which is never logged; to
	// share another gateway's embedded bus, that is GatewayUser and the
	// secret in its TokenFile.
	URL string
	// Listen is the embedded server's client listen address, host:port.
	// Empty means DefaultListen; port 0 picks a free port (tests).
	// Ignored with an external URL.
	Listen string
	// DataDir is the embedded server's JetStream store directory, and
	// holds TokenFile. Required in embedded mode; ignored with an
	// external URL.
	DataDir string
	// Name names the embedded server and the client connection. Empty
	// means "gatehouse".
	Name string
	// Logger receives the server's and the connection's log lines. Nil
	// discards them.
	Logger *slog.Logger
}

// validate checks o and returns the parsed external URLs (nil in
// embedded mode) and the embedded listen host and port.
func (o *Options) validate() (urls []string, host string, port int, err error) {
	if strings.ContainsAny(o.Name, " \t\r\n") {
		return nil, "", 0, fmt.Errorf("bus: name %q must not contain white space", o.Name)
	}
	if strings.TrimSpace(o.URL) != "" {
		urls, err = parseURLs(o.URL)
		return urls, "", 0, err
	}
	if o.DataDir == "" {
		return nil, "", 0, fmt.Errorf("bus: data dir is required for the embedded server (or set url)")
	}
	listen := o.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, port, err = parseListen(listen)
	return nil, host, port, err
}

func parseURLs(s string) ([]string, error) {
	out, err := checkURLs(strings.Split(s, ","))
	if err != nil {
		return nil, fmt.Errorf("bus: url %w", err)
	}
	return out, nil
}

// CheckURLs reports why urls (each one URL, or several comma separated)
// cannot be the bus's external URLs, as New would refuse them: the
// entry at fault (its user info hidden) and the reason. internal/config
// refuses them so, naming bus.url, before anything starts.
func CheckURLs(urls []string) error {
	_, err := checkURLs(strings.Split(strings.Join(urls, ","), ","))
	return err
}

func checkURLs(list []string) ([]string, error) {
	var out []string
	ws := 0 // how many are WebSocket URLs
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			return nil, fmt.Errorf("%q: empty entry in the list", redactList(list))
		}
		isWS, err := checkURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", redact(raw), err)
		}
		if isWS {
			ws++
		}
		out = append(out, raw)
	}
	if ws != 0 && ws != len(out) {
		return nil, fmt.Errorf("%q: mixes ws/wss with nats/tls URLs", redactList(out))
	}
	return out, nil
}

// checkURL checks one bus URL. User info (user:password@, or a token as
// the user) is allowed; the errors never repeat it.
func checkURL(raw string) (ws bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, credential and all
		}
		return false, err
	}
	switch u.Scheme {
	case "nats", "tls":
	case "ws", "wss":
		ws = true
	default:
		return false, errors.New("scheme must be nats, tls, ws or wss")
	}
	if u.Hostname() == "" {
		return false, errors.New("missing host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return false, fmt.Errorf("bad port %q", p)
		}
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false, errors.New("must be scheme://host:port only")
	}
	return ws, nil
}

func parseListen(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("bus: listen %q: %v", s, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bus: listen %q: port must be a number from 0 to 65535", s)
	}
	if h == "" {
		h = "0.0.0.0"
	}
	if !listenHost(h) {
		return "", 0, fmt.Errorf("bus: listen %q: host must be an IP address or localhost", s)
	}
	return h, port, nil
}

// listenHost reports whether h can be the embedded server's listen host:
// an IP or localhost, not a name it would have to resolve.
func listenHost(h string) bool { return h == "localhost" || net.ParseIP(h) != nil }

// CheckListenHost reports why the host of listen, a host:port that is
// otherwise valid, cannot be the embedded server's, as New would refuse
// it. internal/config refuses it so, naming bus.listen, before anything
// starts.
func CheckListenHost(listen string) error {
	h, _, err := net.SplitHostPort(listen)
	if err == nil && h != "" && !listenHost(h) {
		return fmt.Errorf("host must be an IP address or localhost, got %q", listen)
	}
	return nil
}
