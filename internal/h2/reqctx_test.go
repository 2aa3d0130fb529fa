package h2

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// tagged is a context a RequestContext hook makes, as the gateway's
// exchange is: a type the handler looks for.
type tagged struct{ context.Context }

// TestHandlerGetsRequestContext: the handler is served with the very
// context RequestContext returned, not one wrapped around it. The
// gateway finds its per-request state by that context's type, and made
// a second one (a kilobyte and a copy of the Request) for every HTTP/2
// request when a cancellable context came between. The stream's
// cancellation still reaches it: RequestContext is given a parent that
// ends with the stream (here, the client's reset).
func TestHandlerGetsRequestContext(t *testing.T) {
	t.Parallel()
	got := make(chan error, 1)
	o := Options{
		RequestContext: func(ctx context.Context) context.Context { return &tagged{ctx} },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, ok := r.Context().(*tagged)
			if !ok {
				got <- errors.New("the handler's context is not the one RequestContext made")
				return
			}
			if r.URL.Path == "/reset" {
				select {
				case <-ctx.Done():
					got <- nil
				case <-time.After(5 * time.Second):
					got <- errors.New("the client's reset did not end the handler's context")
				}
				return
			}
			_, _ = io.WriteString(w, "ok")
			got <- nil
		}),
	}
	_, addr := serve(t, o)
	rc := dialRaw(t, addr)
	rc.headers(1, true, reqFields("GET", "/")...)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	rc.headers(3, false, reqFields("GET", "/reset")...)
	if err := rc.fr.WriteRSTStream(3, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
