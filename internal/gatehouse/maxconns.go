package gatehouse

import "fmt"

// maxConnections is the cap on open client connections for
// listeners.max_connections set: set itself when positive, otherwise a
// quarter of the file descriptor limit (a connection may hold up to four:
// itself, a host connection and a splice pipe's two ends, and a pipe
// moving bytes both ways six; the rest is the bus's, the hosts' pools'
// and the management listener's). Zero, no cap,
// only where the limit cannot be read. A set cap the limit cannot hold
// even at one descriptor a connection is refused: it would show only
// under load, as failed dials to hosts and a lost bus.
func maxConnections(set int, key string) (int, error) {
	limit, known := fileLimit()
	if set > 0 {
		if known && uint64(set) >= limit {
			return 0, fmt.Errorf("config: %s: %d connections cannot be open at once: this process may open %d file descriptors in all (ulimit -n); raise that, or set at most a quarter of it", key, set, limit)
		}
		return set, nil
	}
	if !known {
		return 0, nil
	}
	return int(min(limit/4, 1<<22)), nil
}
