package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// Hash names the owner function. Every cluster must use the same one, or
// two gateways disagree on owners (harmless, since a forward is never
// forwarded again, but affinity is lost).
type Hash string

const (
	// HashModN is DESIGN §5.1's default:
	// sorted_ids[uint32_be(sha256(app)[0:4]) mod N]. About N/(N+1) of all
	// apps move to a new owner when a cluster joins N.
	HashModN Hash = "modn"
	// HashRendezvous is highest-random-weight hashing: the id with the
	// largest sha256(app + "\n" + id). About 1/(N+1) of all apps move when
	// a cluster joins N.
	HashRendezvous Hash = "rendezvous"
)

// ParseHash reads a cluster.hash setting; "" means [HashModN].
func ParseHash(s string) (Hash, error) {
	switch Hash(s) {
	case "", HashModN:
		return HashModN, nil
	case HashRendezvous:
		return HashRendezvous, nil
	}
	return "", fmt.Errorf("cluster: unknown hash %q (want %q or %q)", s, HashModN, HashRendezvous)
}

// Owner returns the owner of app among ids with h; the zero Hash is
// [HashModN].
func (h Hash) Owner(app string, ids []string) string {
	if h == HashRendezvous {
		return Rendezvous(app, ids)
	}
	return Owner(app, ids)
}

// Owner is DESIGN §5.1's owner function:
// sorted_ids[uint32_be(sha256(app)[0:4]) mod N], ids sorted bytewise and
// de-duplicated, N their count. It returns "" when ids is empty: the owner
// is unknown and the caller serves locally. ids is not modified.
func Owner(app string, ids []string) string {
	ids = sortedUnique(ids)
	if len(ids) == 0 {
		return ""
	}
	return ids[ownerIndex(app, len(ids))]
}

// ownerIndex is the mod-N index of app among n sorted ids.
func ownerIndex(app string, n int) int {
	if n == 1 {
		return 0 // any hash mod 1; a single cluster skips the sha256 per request
	}
	sum := sha256.Sum256([]byte(app))
	return int(binary.BigEndian.Uint32(sum[:4]) % uint32(n))
}

// Rendezvous returns the id with the largest sha256(app + "\n" + id),
// compared bytewise; "" when ids is empty. Order of ids does not matter.
// A tie (never seen with sha256) goes to the smaller id.
func Rendezvous(app string, ids []string) string {
	if len(ids) == 1 {
		return ids[0] // the only candidate wins; no sha256 per request
	}
	var best string
	var bestSum [sha256.Size]byte
	buf := make([]byte, 0, len(app)+1+64)
	for i, id := range ids {
		buf = append(append(append(buf[:0], app...), '\n'), id...)
		sum := sha256.Sum256(buf)
		c := bytes.Compare(sum[:], bestSum[:])
		if i == 0 || c > 0 || (c == 0 && id < best) {
			best, bestSum = id, sum
		}
	}
	return best
}

// sortedUnique returns ids sorted bytewise without duplicates, copying only
// when ids is not already so.
func sortedUnique(ids []string) []string {
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			return slices.Compact(slices.Sorted(slices.Values(ids)))
		}
	}
	return ids
}
