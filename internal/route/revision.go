package route

// Revision is where a zone stands in the store: the store revision of the
// zone's own value and the newest revision among its record sets, the
// delete marker of a deleted one included. A write or delete in a bucket
// gets a revision above every earlier one in that bucket, so each of the
// two only grows as the zone or its records change, and every gateway
// reading the same store sees the same two.
type Revision struct {
	Zone    uint64
	Records uint64
}

// Serial is the zone's SOA serial: the sum of the two revisions, cut to 32
// bits. It moves forward with every change to the zone or its records and
// with nothing else; RFC 1982 arithmetic reads it as moving forward as
// long as fewer than 2^31 changes pass between two looks at it.
func (r Revision) Serial() uint32 { return uint32(r.Zone + r.Records) }

// Revisions holds the Revision of each zone by name, zones deleted or
// never created among them (their records' revisions still count once the
// zone comes back).
type Revisions map[string]Revision

// SawZone notes that the zone's own value was written or deleted at rev.
func (rs Revisions) SawZone(zone string, rev uint64) {
	r := rs[zone]
	r.Zone = max(r.Zone, rev)
	rs[zone] = r
}

// SawRecord notes that a record set of zone was written or deleted at rev.
func (rs Revisions) SawRecord(zone string, rev uint64) {
	r := rs[zone]
	r.Records = max(r.Records, rev)
	rs[zone] = r
}
