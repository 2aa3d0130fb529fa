// Package cors owns gatehouse's per-app cross-origin allow-list (DESIGN §2
// step 5): the answer to a preflight and the headers on an actual response.
// It is pure: it reads request headers and returns decisions; the gateway's
// cors layer applies them.
//
// Origins match exactly (scheme, host and port, as the browser sends the
// Origin header), never by pattern, and an empty list allows no origin.
package cors
