// Package gatehouse assembles one gateway process from its Config: it
// builds every part (bus, store, routing table, host and cluster discovery,
// certificates, the L7 gateway, the listeners, DNS), plugs the seams each
// part declares, and owns every lifetime under one errgroup. It is the only
// package that sees both the control plane and the data plane.
//
// Start order follows DESIGN §3: the management listener binds before
// anything else, so /healthz and /readyz answer while the bus and the store
// come up. Drain order on shutdown: /readyz turns 503, for drain_delay
// (when set) the whole gateway serves on while load balancers see it,
// listeners stop accepting, in-flight requests and pipes finish within
// drain_timeout, hosts and peers are let go, the bus closes last.
package gatehouse
