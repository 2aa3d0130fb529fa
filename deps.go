//go:build tools

package main

import (
	_ "github.com/caddyserver/certmagic"
	_ "github.com/chromedp/chromedp"
	_ "github.com/goccy/go-yaml"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/libdns/libdns"
	_ "github.com/miekg/dns"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.uber.org/goleak"
	_ "golang.org/x/net/http2"
	_ "golang.org/x/sync/errgroup"
)
