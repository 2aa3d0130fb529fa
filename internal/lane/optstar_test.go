package lane

import (
	"net/http"
	"reflect"
	"sync"
	"testing"
)

// TestOptionsStarAsNetHTTP: "OPTIONS *" is answered as net/http answers
// it. Where net/http answers it itself (its general OPTIONS handler) the
// lane hands it off; where the server leaves it to the handler
// (DisableGeneralOptionsHandler, as the edge's are), the lane serves it
// too, and the handler sees the request net/http would give it. Before,
// the lane handed every "OPTIONS *" off.
func TestOptionsStarAsNetHTTP(t *testing.T) {
	t.Parallel()
	const raw = "OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n"
	for _, tc := range []struct {
		name      string
		disable   bool
		lane      int64
		handoffs  []string
		handlerOn bool
	}{
		{"net/http answers", false, 0, []string{reasonTarget}, false},
		{"the handler answers", true, 1, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var handoffs []string
			th := &testHandler{}
			plain, laneAddr, _ := servers(t, th, Options{
				Server: &http.Server{DisableGeneralOptionsHandler: tc.disable},
				OnHandoff: func(r string) {
					mu.Lock()
					handoffs = append(handoffs, r)
					mu.Unlock()
				},
			})
			want, _ := roundTrip(t, plain, raw, []string{"OPTIONS"})
			th.mu.Lock()
			wantSeen := th.seen
			th.seen = nil
			th.mu.Unlock()
			got, _ := roundTrip(t, laneAddr, raw, []string{"OPTIONS"})
			th.mu.Lock()
			gotSeen := th.seen
			th.mu.Unlock()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("responses differ\nlane:     %+v\nnet/http: %+v", got, want)
			}
			if !reflect.DeepEqual(gotSeen, wantSeen) {
				t.Errorf("the handler saw different requests\nlane:     %+v\nnet/http: %+v", gotSeen, wantSeen)
			}
			if on := len(gotSeen) == 1 && gotSeen[0].RequestURI == "*" && gotSeen[0].Path == "*"; on != tc.handlerOn {
				t.Errorf("the handler saw %+v; want it to see OPTIONS *: %v", gotSeen, tc.handlerOn)
			}
			if n := th.lane.Load(); n != tc.lane {
				t.Errorf("the lane served %d requests itself, want %d", n, tc.lane)
			}
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(handoffs, tc.handoffs) {
				t.Errorf("handoffs %v, want %v", handoffs, tc.handoffs)
			}
		})
	}
}
