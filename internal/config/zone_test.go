package config

import "testing"

// TestZonesAndAddressesThatLoad: the zones and listener addresses a
// private network, a test or the demo uses still load next to the public
// suffixes and group addresses that are refused (testdata/err-zone-*,
// err-*-addr-*): names the Public Suffix List does not know, its private
// section (a platform's own domain), home.arpa, loopback and every
// interface.
func TestZonesAndAddressesThatLoad(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-zone", "localhost"}, // the demo's
		{"-zone", "test"},
		{"-zone", "internal"},
		{"-zone", "home.arpa"},
		{"-zone", "apps.example.com"},
		{"-zone", "example.co.uk"},
		{"-zone", "herokuapp.com"},
		{"-https", "127.0.0.1:8443"},
		{"-https", "[::1]:8443"},
		{"-https", "0.0.0.0:8443"},
		{"-https", "[::]:8443"},
		{"-http", "192.0.2.255:8080"}, // a subnet's last address is a host's on a /23
		{"-dns", "localhost:5353"},
	} {
		if _, err := Load(args, nil); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}
