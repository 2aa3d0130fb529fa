//go:build !unix

package gatehouse

// fileLimit cannot be read here: listeners.max_connections 0 is no cap.
func fileLimit() (uint64, bool) { return 0, false }
