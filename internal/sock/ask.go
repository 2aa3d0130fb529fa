package sock

import "errors"

// ErrNotIdle is the error of a Read after AskIdle when the socket already
// held bytes, or the peer's end of the stream, before the question went
// out: the question was not sent.
var ErrNotIdle = errors.New("sock: the peer sent data or closed before it was asked")
