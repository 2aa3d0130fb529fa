// Package auth owns edge token verification (DESIGN §2 step 7, §6): JWTs
// signed with EdDSA (Ed25519) by a configured issuer, read from the
// Authorization: Bearer header only, and the claims gatehouse uses: iss,
// sub, aud (app ids or "*"), exp, nbf, iat (not in the future), scope and
// limits. A header typ, when present, must say JWT, at+jwt (or a vendor's
// -at+jwt) or JOSE.
//
// Verification uses github.com/golang-jwt/jwt/v5 with the algorithm pinned
// to EdDSA (jwt.WithValidMethods), so "none", HS* and RS* tokens are refused
// before any key is touched, and an issuer's keys are Ed25519 public keys
// only: there is no HMAC secret to confuse with a public key.
//
// Issuer keys come from a file, PEM ("PUBLIC KEY" blocks, PKIX Ed25519) or
// JWKS (kty OKP, crv Ed25519), or are passed directly as values. A
// token's kid picks the keys with that kid and those with none; a kid that
// names no key of its issuer is refused, as a bad signature is.
//
// Errors map to statuses in one place, [Status]: no token, a malformed,
// expired, not-yet-valid, future-issued, wrongly typed or wrongly signed
// one, an unknown issuer, or a token in the query string are 401; a valid
// token whose aud does not cover the app is 403.
package auth
