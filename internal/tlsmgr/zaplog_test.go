package tlsmgr

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// certmagic's warnings and errors reach the gateway's log with their
// fields; its info lines do not; and a message any client can provoke on
// the handshake path is logged at most zapBurst times a minute.
func TestCertmagicLogsSampled(t *testing.T) {
	var logs testutil.SyncBuffer
	zl := zapLogger(slog.New(slog.NewTextHandler(&logs, nil))).Named("obtain")

	zl.Info("acquiring lock", zap.String("identifier", "a.test"))
	zl.Warn("stapling OCSP", zap.String("identifier", "a.test"))
	for range 100 {
		zl.Error("could not get certificate from issuer", zap.String("identifier", "b.test"), zap.Error(errors.New("HTTP 429 rateLimited")))
	}

	cases := []struct {
		sub  string
		want int
	}{
		{`msg="certmagic: acquiring lock"`, 0},
		{`level=WARN msg="certmagic: stapling OCSP" logger=obtain identifier=a.test`, 1},
		{`level=ERROR msg="certmagic: could not get certificate from issuer" logger=obtain error="HTTP 429 rateLimited" identifier=b.test`, zapBurst},
	}
	for _, c := range cases {
		if got := strings.Count(logs.String(), c.sub); got != c.want {
			t.Errorf("%s: %d lines, want %d\n%s", c.sub, got, c.want, logs.String())
		}
	}
}
