// Package clustertest holds tests of tlsmgr on the cluster's shared
// certificate storage (internal/store's CertKV on embedded NATS). It is a
// separate package so tlsmgr itself depends on nothing internal.
package clustertest
