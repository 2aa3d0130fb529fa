// Package metrics builds gatehouse's Prometheus registry and the collectors
// the request path shares (DESIGN §2 step 2, §3): requests by app, status
// class and method, request latency, upstream errors by reason, and the
// active_connections gauge that drain watches (exported under DESIGN's name
// active_connections and as gatehouse_active_connections).
//
// Nothing here is global: [New] registers a [Set] on the registry it is
// given, so two gateways in one process (tests, two clusters) each have
// their own. Label values never carry payload bytes or client-chosen
// strings: app ids come from the routing table, methods are folded to a
// fixed set, status codes to their class.
package metrics
