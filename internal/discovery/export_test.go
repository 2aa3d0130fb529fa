package discovery

// SyncLanes returns once each lane has handled every message queued on
// it before the call.
func SyncLanes(d *Discovery) {
	for _, l := range []*lane{d.provenLane, d.unprovenLane} {
		done := make(chan struct{})
		l.c <- laneMsg{done: done}
		<-done
	}
}
