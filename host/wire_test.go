package host

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
)

// The data plane cannot import this package (it brings NATS), so it
// keeps its own copy of the challenge's wire names: they must agree, or a
// gateway would relay challenges again.
func TestDataPlaneKnowsTheChallenge(t *testing.T) {
	if ChallengePath != httpwire.ChallengePath || ChallengeALPN != httpwire.ChallengeALPN {
		t.Fatalf("host: %q %q; data plane: %q %q", ChallengePath, ChallengeALPN, httpwire.ChallengePath, httpwire.ChallengeALPN)
	}
}
