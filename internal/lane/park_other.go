//go:build !linux

package lane

// parker holds nothing off Linux: idle connections wait on a goroutine.
type parker struct{}

func newParker(*Server) *parker    { return &parker{} }
func (*parker) can(*conn) bool     { return false }
func (*parker) park(*conn) bool    { return false }
func (*parker) closeAll(stop bool) {}
