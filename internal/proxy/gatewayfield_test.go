package proxy

import "testing"

// TestGatewayField: the names a host may not send on a response, in every
// spelling a client or a CGI-style reader takes for them, and none of the
// host's own.
func TestGatewayField(t *testing.T) {
	tests := []struct {
		k    string
		want bool
	}{
		{"X-Gatehouse-Cluster", true},
		{"X-Gatehouse-No-Host", true},
		{"x-gatehouse-forwarded", true},
		{"X_Gatehouse_Subject", true},
		{"X_gatehouse_scopes", true},
		{"X-GATEHOUSE-ISSUER", true},
		{"X-Gatehouse-", true},
		{"X-Failover-Cluster", true},
		{"x_failover_cluster", true},
		{"X-Gatehouse", false},
		{"X-Gatehousekeeping", false},
		{"X-Failover-Clusters", false},
		{"X-Failover", false},
		{"Content-Type", false},
		{"", false},
		{"X-Gatehouse\x00Cluster", false},
	}
	for _, tt := range tests {
		if got := gatewayField(tt.k); got != tt.want {
			t.Errorf("gatewayField(%q) = %v, want %v", tt.k, got, tt.want)
		}
	}
	hits := 0
	if n := testing.AllocsPerRun(100, func() {
		for _, tt := range tests {
			if gatewayField(tt.k) {
				hits++
			}
		}
	}); n != 0 {
		t.Errorf("gatewayField allocates %v times a run, want 0", n)
	}
}
