package api

import (
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
// charged or found good, and at most the remaining units are in play.
type guard struct {
	mu      sync.Mutex
	w       *limit.Window
	q       limit.Quota
	pending map[limit.Key]int
}

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
	return &guard{w: w, q: q, pending: map[limit.Key]int{}}, nil
}

// enter reserves one of k's units for a check, or reports how long until
// one is free.
func (g *guard) enter(k limit.Key) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	res, _ := g.w.Charge(k, 0, g.q) // a zero charge only reports; q is valid
	if res.Remaining-g.pending[k] <= 0 {
		return max(res.Reset, time.Second), false
	}
	g.pending[k]++
	return 0, true
}

// leave releases k's reserved unit, charging it when the token was wrong.
func (g *guard) leave(k limit.Key, wrong bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[k]--; g.pending[k] <= 0 {
		delete(g.pending, k)
	}
	if wrong {
		_, _ = g.w.Charge(k, 1, g.q)
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
	if wait, ok := a.guard.enter(k); !ok {
		w.Header().Set("Retry-After", strconv.FormatInt(limit.Seconds(wait), 10))
		problem.Write(w, http.StatusTooManyRequests, "too many wrong tokens from this address; retry later")
		return false, true
	}
	ok = check()
	a.guard.leave(k, !ok)
	return ok, false
}
