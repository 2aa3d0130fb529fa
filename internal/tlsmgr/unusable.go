package tlsmgr

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/caddyserver/certmagic"
)

// issueLock is the lock certmagic holds while it obtains or renews name's
// certificate and writes its three items (certmagic's lockKey with
// certIssueLockOp). Holding it while we judge and delete the items means
// no order of any gateway is half-way through writing them.
func issueLock(name string) string { return "issue_cert_" + name }

// lockWait bounds how long a check waits for another gateway's order of
// the same name before it tries again at the next tick.
const lockWait = time.Minute

// verdict is what deleteUnusable found of a stored certificate.
type verdict struct {
	deleted bool
	why     error    // why the items do not make a certificate; nil: they do, or were not all read
	digest  [32]byte // of the unusable items, to be seen again before they are deleted
}

// deleteUnusable deletes name's stored certificate, key and metadata
// (issued by issuerKey) when all three are there and do not make a
// certificate (bad PEM, a key of another certificate, metadata that does
// not decode), the way certmagic loads them, and the same three items
// were judged so at the check before (seen is their digest then).
// certmagic never orders a replacement while they are stored (its obtain
// is a no-op when the items exist), so the name's clients would get the
// bootstrap certificate until an operator deleted them by hand;
// certmagic's renewal would overwrite them anyway. Items it cannot read
// (the store down), or that are missing, are left alone: only a
// certificate proven unusable twice is deleted. Twice, a check apart,
// because a store replica that is behind may answer a read with a
// renewed certificate beside the key it replaced: a moment later the
// items agree, and nothing good is deleted.
func deleteUnusable(ctx context.Context, st certmagic.Storage, issuerKey, name string, seen [32]byte) (verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	lock := issueLock(name)
	if err := st.Lock(ctx, lock); err != nil {
		return verdict{}, fmt.Errorf("taking the lock %s: %w", lock, err)
	}
	defer func() { _ = st.Unlock(context.WithoutCancel(ctx), lock) }()

	// Deleted in this order so that a delete failing half-way leaves the
	// certificate item, which the next check finds again, while certmagic
	// obtains anew once the key or metadata is missing.
	keys := []string{
		certmagic.StorageKeys.SiteMeta(issuerKey, name),
		certmagic.StorageKeys.SitePrivateKey(issuerKey, name),
		certmagic.StorageKeys.SiteCert(issuerKey, name),
	}
	h := sha256.New()
	var items [3][]byte
	for i, k := range keys {
		b, err := st.Load(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			return verdict{}, nil
		}
		if err != nil {
			return verdict{}, fmt.Errorf("reading %s: %w", k, err)
		}
		items[i] = b
		_, _ = fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	v := verdict{why: unusable(items[2], items[1], items[0])}
	if v.why == nil {
		return v, nil
	}
	h.Sum(v.digest[:0])
	if v.digest != seen {
		return v, nil
	}
	for _, k := range keys {
		if err := st.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return v, fmt.Errorf("deleting %s: %w", k, err)
		}
	}
	v.deleted = true
	return v, nil
}

// unusable says why a stored certificate, key and metadata do not make a
// certificate certmagic can serve, or nil when they do. It checks what
// certmagic's load checks and no more: an expired certificate is usable
// (certmagic renews it).
func unusable(certPEM, keyPEM, meta []byte) error {
	// Decoded as certmagic decodes it: JSON that is not an object ([],
	// "x") fails its load as surely as no JSON.
	if err := json.Unmarshal(meta, new(certmagic.CertificateResource)); err != nil {
		return fmt.Errorf("the metadata does not decode: %w", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return err
	}
	return nil
}
