package bus

import "testing"

func TestDialable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://0.0.0.0:4222":   "nats://127.0.0.1:4222",
		"nats://[::]:4222":      "nats://[::1]:4222",
		"nats://127.0.0.1:4222": "nats://127.0.0.1:4222",
		"nats://[::1]:4222":     "nats://[::1]:4222",
		"nats://localhost:4222": "nats://localhost:4222",
	} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}
