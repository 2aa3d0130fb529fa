package route

import "testing"

func TestApplyHosts(t *testing.T) {
	var l Live
	b := NewBuilder(&l)
	b.SetHost(&Host{ID: "h1", Apps: []string{"a"}, State: HostVerified})
	h1 := b.Host("h1").Health
	before := l.Load()
	b.ApplyHosts([]*Host{
		{ID: "h1", Apps: []string{"a"}, State: HostVerified, Addr: "x:1"},
		{ID: "h2", Apps: []string{"a"}, State: HostVerified},
		{ID: "h3", Apps: []string{"a"}, State: HostProvisional},
	}, []string{"h3", "nope"})
	tbl := l.Load()
	if p := tbl.Pool("a"); len(p) != 2 || p[0].Addr != "x:1" || p[1].ID != "h2" {
		t.Fatalf("pool %v", ids(p))
	}
	if len(tbl.Hosts()) != 2 {
		t.Fatalf("hosts %v: an id in both lists must end up deleted", ids(tbl.Hosts()))
	}
	if tbl.Pool("a")[0].Health != h1 || tbl.Pool("a")[1].Health == nil {
		t.Fatal("health not carried over or not created")
	}
	if len(before.Pool("a")) != 1 {
		t.Fatal("an old snapshot changed")
	}
	b.ApplyHosts(nil, nil)
	if l.Load() != tbl {
		t.Fatal("an empty batch republished")
	}
}
