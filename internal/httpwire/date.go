package httpwire

import (
	"net/http"
	"sync/atomic"
	"time"
)

// Date is a response's Date value, formatted once a second, for the
// servers that write their own response heads (the lane, and h2's header
// blocks). The zero value is ready; safe for concurrent use.
type Date struct {
	cur atomic.Pointer[dateText]
}

type dateText struct {
	sec  int64
	text string
}

// Text returns the current time in the HTTP date format.
func (d *Date) Text() string {
	now := time.Now().Unix()
	if t := d.cur.Load(); t != nil && t.sec == now {
		return t.text
	}
	t := &dateText{sec: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	d.cur.Store(t)
	return t.text
}
