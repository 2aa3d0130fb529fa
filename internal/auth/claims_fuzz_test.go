package auth

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzClaims feeds a token's payload to Claims.UnmarshalJSON, which
// golang-jwt runs before it checks the signature: whatever the bytes, it
// errs or yields claims that survive a round trip through their JSON.
func FuzzClaims(f *testing.F) {
	for _, s := range []string{
		`{"iss":"idp","sub":"alice","aud":["shop"],"exp":1772370000,"scope":"read write"}`,
		`{"aud":"*","exp":1.5e9,"nbf":null,"scope":["platform"],"limits":{"rps":5,"read_Bps":1}}`,
		`{"Scope":"platform","SUB":"x","exp":"1772370000"}`,
		`{"scope":"a","scope":"b","limits":null}`,
		`[]`, `null`, `{"exp":-1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Claims
		if err := json.Unmarshal(b, &c); err != nil {
			return
		}
		out, err := json.Marshal(&c)
		if err != nil {
			t.Fatalf("claims %+v do not marshal: %v", c, err)
		}
		var again Claims
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("%s: own JSON %s refused: %v", b, out, err)
		}
		if !reflect.DeepEqual(normal(c), normal(again)) {
			t.Fatalf("%s: %+v, after a round trip %+v", b, c, again)
		}
	})
}

// normal makes empty and nil lists alike, as omitempty writes neither.
func normal(c Claims) Claims {
	if len(c.Audience) == 0 {
		c.Audience = nil
	}
	if len(c.Scope) == 0 {
		c.Scope = nil
	}
	return c
}
