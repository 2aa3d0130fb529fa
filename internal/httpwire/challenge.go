package httpwire

// The host challenge's wire names, as the host package spells them
// (host.ChallengePath, host.ChallengeALPN): the data plane refuses to
// relay a challenge (DESIGN §4), and must not import host, which brings
// the NATS client with it.
const (
	ChallengePath = "/.well-known/gatehouse/challenge"
	ChallengeALPN = "gatehouse-challenge"
)
