package gateway

import "net/http"

func (g *Gateway) healthz(next http.Handler) http.Handler { return next }
func (g *Gateway) observe(next http.Handler) http.Handler { return next }
func (g *Gateway) route(next http.Handler) http.Handler   { return next }
func (g *Gateway) hygiene(next http.Handler) http.Handler { return next }
