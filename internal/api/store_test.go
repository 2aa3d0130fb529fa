package api

import "testing"

// newStore returns the Store the tests run against and its not-found
// sentinel.
func newStore(t *testing.T) (Store, error) {
	return newMemStore(), errMemNotFound
}
