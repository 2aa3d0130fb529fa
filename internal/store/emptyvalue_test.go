package store_test

import (
	"errors"
	"io/fs"
	"reflect"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// An empty value reads back as nil, not []byte{}: the server leaves an
// empty message's data out of its answer. That is no difference to any
// reader: certmagic and tlsmgr compare, decode or count what Load returns
// (bytes.Equal, json.Unmarshal, len), never test it for nil, and a 0-byte
// file is a file to certmagic's own FileStorage. What must hold is that
// an empty value is there: Load, Stat, Exists and List find it, as a
// 0-byte file, not as a missing one.
func TestCertKVEmptyValueIsAFile(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	c := s.Certs()
	ctx := t.Context()
	mustPut(t, c.Store(ctx, crt, []byte{}))
	if v, err := c.Load(ctx, crt); err != nil || len(v) != 0 {
		t.Fatalf("Load of an empty value = %q, %v", v, err)
	}
	if _, size, term, err := c.Stat(ctx, crt); err != nil || size != 0 || !term {
		t.Fatalf("Stat of an empty value = size %d, terminal %v, %v", size, term, err)
	}
	if !c.Exists(ctx, crt) {
		t.Fatal("an empty value does not exist")
	}
	dir := "certificates/acme-v02.api.letsencrypt.org-directory/example.com"
	if got, err := c.List(ctx, dir, false); err != nil || !reflect.DeepEqual(got, []string{crt}) {
		t.Fatalf("List(%s) = %v, %v", dir, got, err)
	}
	mustPut(t, c.Delete(ctx, crt))
	if _, err := c.Load(ctx, crt); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load after Delete: %v", err)
	}
}
