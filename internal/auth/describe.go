package auth

import (
	"errors"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// RFC 6750 §3.1 error codes, for a WWW-Authenticate: Bearer challenge.
const (
	CodeInvalidRequest    = "invalid_request"
	CodeInvalidToken      = "invalid_token"
	CodeInsufficientScope = "insufficient_scope"
)

// Describe says what a verification error means for a client: the RFC
// 6750 error code of the challenge ("" for a request with no bearer token,
// which RFC 6750 §3.1 answers with the bare challenge) and a description
// of what was wrong ("" when there is nothing to say beyond "no token").
// An expired token and one not valid yet are named, so a client fetches
// a new token, or fixes its clock, rather than doubting its key; a
// signature that does not verify, an unknown issuer and a kid naming no
// key are one description, which names no issuer, key or kid. The
// description holds only the characters RFC 6750 §3 allows in
// error_description (no quote or backslash).
func Describe(err error) (code, description string) {
	switch {
	case err == nil:
		return "", ""
	case errors.Is(err, ErrQueryToken):
		return CodeInvalidRequest, "tokens are accepted in the Authorization header only, never in the query string"
	case errors.Is(err, ErrTwoHeaders):
		return CodeInvalidRequest, "send one bearer token, in one Authorization header"
	case errors.Is(err, ErrNoToken):
		if err != ErrNoToken { // Authorization with another scheme
			return "", "the Authorization header holds no Bearer token"
		}
		return "", ""
	case errors.Is(err, ErrScope):
		return CodeInsufficientScope, "the token is valid, but its scope does not include " + PlatformScope
	case errors.Is(err, ErrAudience):
		return CodeInsufficientScope, "the token's audience (aud) does not cover this app"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return CodeInvalidToken, "the token is not a well-formed JWT"
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, errNoIssuer):
		return CodeInvalidToken, "the token's signature does not verify with a key of an issuer this gateway trusts"
	case errors.Is(err, jwt.ErrTokenExpired):
		return CodeInvalidToken, "the token has expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return CodeInvalidToken, "the token is not valid yet (its nbf is in the future)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return CodeInvalidToken, "the token is not valid yet (its iat is in the future)"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return CodeInvalidToken, "the token has no exp"
	case errors.Is(err, ErrInvalid):
		// the reasons VerifyAny gives after the signature held, and
		// the callers' own (a static token that is not the control
		// token): gatehouse's words, with nothing of a key in them
		why := strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
		if why == err.Error() {
			return CodeInvalidToken, "the token is not valid"
		}
		return CodeInvalidToken, "the token is not valid: " + challengeSafe(why)
	}
	return CodeInvalidToken, "the token is not valid"
}

// Malformed reports whether err refused a token that is not a JWT at all
// (not three base64url parts of JSON): for a caller that also takes an
// opaque token, the token may have been meant as that one.
func Malformed(err error) bool { return errors.Is(err, jwt.ErrTokenMalformed) }

// challengeSafe is s with every byte RFC 6750 §3 keeps out of
// error_description (%x20-21 / %x23-5B / %x5D-7E) replaced by '?', and
// the quote by an apostrophe.
func challengeSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '"':
			b[i] = '\''
		case c < 0x20 || c > 0x7e || c == '\\':
			b[i] = '?'
		}
	}
	return string(b)
}

// Challenge is the WWW-Authenticate value for a request refused for err
// in realm: the bare Bearer challenge for one without a token, else with
// the error code and its description, and for a missing scope the scope
// wanted (scope, "" for none).
func Challenge(realm string, err error, scope string) string {
	code, desc := Describe(err)
	c := `Bearer realm="` + challengeSafe(realm) + `"`
	if code == "" {
		return c
	}
	c += `, error="` + code + `", error_description="` + desc + `"`
	if code == CodeInsufficientScope && scope != "" {
		c += `, scope="` + challengeSafe(scope) + `"`
	}
	return c
}
