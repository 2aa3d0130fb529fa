package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// defaultBadTokens is the failure window per client address when
// Options.BadTokens is zero: the unknown-host window's default (DESIGN §2
// step 3), as both meter guessing.
var defaultBadTokens = limit.Quota{Limit: 100, Window: 60 * time.Second}

// guard meters wrong bearer tokens per client address, so that the static
// control token cannot be guessed at the speed of the network. Only a
// request that carries a bearer token is metered, and only a refused one
// is charged; while an address's window is spent, every token it sends
// is refused unchecked, the right one too, since answering that one
// would tell a guesser which guess was right.
//
// The window alone would let a burst through: every request that finds
// one unit left would be checked before any of them is charged. So the
// requests being checked hold their unit (pending) until they are
// charged or found good, and at most the remaining units are in play. A
// request that finds them all in play waits (up to maxGuardWait) for one
// of those checks to end, rather than being refused while the window has
// room: a platform's burst of right tokens from one address is served,
// and a burst of guesses still meets 429 once the window is spent.
type guard struct {
	mu      sync.Mutex
	w       *limit.Window
	q       limit.Quota
	pending map[limit.Key]int
	// freed is closed, and replaced, when a check ends while requests
	// wait for one (waiting).
	freed   chan struct{}
	waiting int
}

// maxGuardWait bounds a request's wait for a unit held by checks under
// way; past it, the request is refused as if the window were spent.
const maxGuardWait = time.Second

func newGuard(q limit.Quota, maxKeys int, now func() time.Time) (*guard, error) {
	if q.Limit <= 0 || q.Window <= 0 {
		q = defaultBadTokens
	}
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("api: bad tokens: %w", err)
	}
	w, err := limit.NewWindow(limit.WindowOptions{MaxKeys: maxKeys, Now: now})
	if err != nil {
		return nil, fmt.Errorf("api: bad tokens: %w", err)
	}
	return &guard{w: w, q: q, pending: map[limit.Key]int{}, freed: make(chan struct{})}, nil
}

// enter reserves one of k's units for a check, or reports how long until
// one is free. While the window has room but every unit left is held by
// a check under way, it waits for one to end (at most maxGuardWait, or
// until ctx ends).
func (g *guard) enter(ctx context.Context, k limit.Key) (time.Duration, bool) {
	var timer *time.Timer
	for {
		g.mu.Lock()
		res, _ := g.w.Charge(k, 0, g.q) // a zero charge only reports; q is valid
		if res.Remaining <= 0 {
			g.mu.Unlock()
			return max(res.Reset, time.Second), false
		}
		if res.Remaining-g.pending[k] > 0 {
			g.pending[k]++
			g.mu.Unlock()
			return 0, true
		}
		g.waiting++
		freed := g.freed
		g.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(maxGuardWait)
			defer timer.Stop()
		}
		woke := false
		select {
		case <-freed:
			woke = true
		case <-timer.C:
		case <-ctx.Done():
		}
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
		if !woke {
			return time.Second, false // every unit still in play
		}
	}
}

// leave releases k's reserved unit, charging it when the token was wrong,
// and wakes the requests waiting for a unit.
func (g *guard) leave(k limit.Key, wrong bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[k]--; g.pending[k] <= 0 {
		delete(g.pending, k)
	}
	if wrong {
		_, _ = g.w.Charge(k, 1, g.q)
	}
	if g.waiting > 0 {
		close(g.freed)
		g.freed = make(chan struct{})
	}
}

// checkToken runs check, which reports whether r's credential holds,
// under r's client address's window when r carries a bearer token. It
// returns false for a credential that does not hold; when the window was
// spent it has answered 429 itself and sets answered.
func (a *API) checkToken(w http.ResponseWriter, r *http.Request, check func() bool) (ok, answered bool) {
	if _, err := auth.BearerToken(r); err != nil {
		return check(), false // no token guessed: nothing to meter
	}
	k := limit.KeyFor("", clientIP(r))
	if wait, ok := a.guard.enter(r.Context(), k); !ok {
		w.Header().Set("Retry-After", strconv.FormatInt(limit.Seconds(wait), 10))
		problem.Write(w, http.StatusTooManyRequests, "too many wrong tokens from this address; retry later")
		return false, true
	}
	ok = check()
	a.guard.leave(k, !ok)
	return ok, false
}
