package store

import (
	"context"
	"strings"
	"testing"
)

// A read that panics (a bug in a value's decoding, say) runs in a
// goroutine of readInOrder's, where net/http's recovery, which turned a
// panic in a handler into one failed request, does not reach: the page
// fails with it instead of the gateway, after using the reads before it.
func TestAReadThatPanicsIsThePagesError(t *testing.T) {
	t.Parallel()
	var used []int
	err := readInOrder(context.Background(), 100, 100, func(_ context.Context, i int) int {
		if i == 7 {
			panic("a value that does not decode")
		}
		return i
	}, func(r int) int { used = append(used, r); return 100 })
	if err == nil || !strings.Contains(err.Error(), "a value that does not decode") {
		t.Fatalf("err %v, want the read's panic", err)
	}
	if len(used) != 7 || used[6] != 6 {
		t.Fatalf("used %v, want reads 0 to 6, in order", used)
	}
}
