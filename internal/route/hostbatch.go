package route

// ApplyHosts adds or replaces every host in set and deletes every id in
// del, then publishes one snapshot: discovery uses it to fold a burst of
// host events (a fleet reconnecting) into one table rebuild instead of one
// per host. A host in set whose Health is nil gets the Health of the host
// it replaces, or a new one, as in [Builder.SetHost]. Deleting an unknown
// id is a no-op; an id in both lists ends up deleted.
func (b *Builder) ApplyHosts(set []*Host, del []string) {
	if len(set) == 0 && len(del) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range set {
		if h.Health == nil {
			if old := b.hosts[h.ID]; old != nil {
				h.Health = old.Health
			} else {
				h.Health = new(Health)
			}
		}
		b.hosts[h.ID] = h
	}
	for _, id := range del {
		delete(b.hosts, id)
	}
	b.publishLocked(true)
}
