package config

import (
	"errors"
	"testing"
)

// TestFlagWithoutItsValue: a flag given no value takes the next flag as
// its value, as Go's flags do, and that flag's value is left over as a
// stray argument. The error named only the stray argument; it names the
// flag that took the other one, and repeats no secret: a control token
// or a bus URL's credential.
func TestFlagWithoutItsValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-http-mode", "-http", "127.0.0.1:0"}, `config: unexpected argument "127.0.0.1:0" (-http-mode took "-http" as its value: give it one, as -http-mode VALUE)`},
		{[]string{"-zone", "--https=:1", "x"}, `config: unexpected argument "x" (-zone took "--https=…" as its value: give it one, as -zone VALUE)`},
		// The value of a flag that holds a secret is not repeated: error
		// lines end up in logs.
		{[]string{"-zone", "-control-token=s3cret-0123456789", "x"}, `config: unexpected argument "x" (-zone took "-control-token=…" as its value: give it one, as -zone VALUE)`},
		{[]string{"-http-mode", "-control-token", "s3cret-0123456789"}, `config: unexpected argument (the value of -control-token, not shown) (-http-mode took "-control-token" as its value: give it one, as -http-mode VALUE)`},
		{[]string{"-http-mode", "-bus", "nats://gw:s3cret@nats:4222,nats://gw:s3cret@nats-2:4222"}, `config: unexpected argument "nats://xxxxx@nats:4222,nats://xxxxx@nats-2:4222" (-http-mode took "-bus" as its value: give it one, as -http-mode VALUE)`},
		{[]string{"-config", "-data", "d"}, `config: unexpected argument "d" (-config took "-data" as its value: give it one, as -config VALUE)`},
		{[]string{"-zone", "a.example", "x"}, `config: unexpected argument "x" (flags come as -name value)`},
		// Two flags without their values: the one named is the one whose
		// taken flag's value is left over, so a token stays unshown.
		{[]string{"-zone", "-http", "-http-mode", "-control-token", "s3cret-0123456789"}, `config: unexpected argument (the value of -control-token, not shown) (-http-mode took "-control-token" as its value: give it one, as -http-mode VALUE)`},
		// -h, which the flag package takes for help, taken as a value.
		{[]string{"-config", "-h", "x"}, `config: unexpected argument "x" (-config took "-h" as its value: give it one, as -config VALUE)`},
		// No flag without its value, and still a secret left over: a bus
		// list split by a space after its comma, a -bus= or
		// -control-token= with its value after a space, a token the
		// shell split at a space; and a swallow that is not the one the
		// stray argument comes from.
		{[]string{"-bus", "nats://gw:s3cret@nats:4222,", "nats://gw:s3cret@nats-2:4222"}, `config: unexpected argument "nats://xxxxx@nats-2:4222" (flags come as -name value)`},
		{[]string{"-bus=", "nats://gw:s3cret@nats:4222"}, `config: unexpected argument "nats://xxxxx@nats:4222" (flags come as -name value)`},
		{[]string{"-zone", "-http", "-bus", "nats://gw:s3cret@nats:4222,", "nats://gw:s3cret@nats-2:4222"}, `config: unexpected argument "nats://xxxxx@nats-2:4222" (-zone took "-http" as its value: give it one, as -zone VALUE)`},
		{[]string{"-control-token=", "s3cret-0123456789"}, `config: unexpected argument (the value of -control-token, not shown) (flags come as -name value)`},
		{[]string{"--control-token", "s3cret-0123", "456789"}, `config: unexpected argument (the value of -control-token, not shown) (flags come as -name value)`},
	} {
		_, err := Load(tc.args, nil)
		var ue *UsageError
		if err == nil || err.Error() != tc.want || !errors.As(err, &ue) {
			t.Errorf("%q: got %v\nwant %s (a usage error)", tc.args, err, tc.want)
		}
	}
}
