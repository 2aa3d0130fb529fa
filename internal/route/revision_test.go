package route

import "testing"

// TestSerial: a zone's serial is the sum of its zone and newest record
// revision; each change publishes a table with the new one and leaves the
// tables already published as they were, and a revision older than one
// seen (a change delivered twice) moves nothing back.
func TestSerial(t *testing.T) {
	var live Live
	b := NewBuilder(&live)
	b.Replace(State{Zones: []*Zone{{Name: "z.test"}}, Revisions: Revisions{"z.test": {Zone: 5, Records: 2}}})
	www := &Record{Zone: "z.test", Name: "www", Type: "A", Values: []string{"192.0.2.1"}}
	steps := []struct {
		name   string
		change func()
		want   uint32
	}{
		{"loaded", func() {}, 7},
		{"record put", func() { b.PutRecord(www, 9) }, 14},
		{"record deleted", func() { b.DeleteRecord("z.test", "www", "A", 11) }, 16},
		{"stale record put", func() { b.PutRecord(www, 9) }, 16},
		{"record of another zone", func() { b.PutRecord(&Record{Zone: "y.test", Name: "a", Type: "A"}, 12) }, 16},
		{"zone put", func() { b.PutZone(&Zone{Name: "z.test", TTL: 30}, 8) }, 19},
		{"zone deleted", func() { b.DeleteZone("z.test", 10) }, 21},
	}
	for _, st := range steps {
		before := live.Load()
		was := before.Serial("z.test")
		st.change()
		if got := live.Load().Serial("z.test"); got != st.want {
			t.Errorf("%s: serial %d, want %d", st.name, got, st.want)
		}
		if got := before.Serial("z.test"); got != was {
			t.Errorf("%s: the table published before the change went from serial %d to %d", st.name, was, got)
		}
	}
	if got := live.Load().Serial("y.test"); got != 12 {
		t.Errorf("y.test: serial %d, want 12", got)
	}
}
