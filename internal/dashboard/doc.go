// Package dashboard serves the management listener's dashboard (DESIGN
// §3): one static page that shows, from the gateway's own JSON routes,
// readiness and the open connection count (/readyz), this cluster and its
// peers (GET /api/v3/discovery/clusters), and, once the operator types
// the platform credential into the page, the apps (GET /api/v3/apps) and
// hosts with their state (GET /api/v3/hosts), a page of 100 at a time:
// a platform's whole list is megabytes for the gateway to build and the
// browser to lay out, and the page asks again every few seconds.
//
// The page holds no secret: it is the same bytes for everyone, and the
// credential an operator types stays in the page's memory (sent only as
// an Authorization header to the same origin; never stored, never in the
// address) until its forget button or closing the tab drops it. Its
// Content-Security-Policy admits only its own script, style and
// same-origin fetches, and no other page may frame it (frame-ancestors,
// and X-Frame-Options for browsers without CSP).
package dashboard
