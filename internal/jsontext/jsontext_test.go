package jsontext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	many := func(dup string) string {
		var b strings.Builder
		b.WriteString(`{`)
		for i := range 20 {
			fmt.Fprintf(&b, `"k%02d":%d,`, i, i)
		}
		b.WriteString(`"` + dup + `":1}`)
		return b.String()
	}
	for _, tc := range []struct {
		name, in string
		want     string // "" ok, else a fragment of the error
	}{
		{"plain", `{"name":"a","policy":[{"action":"deny","path":"/admin/*"}]}`, ""},
		{"keys again in other objects", `[{"a":1},{"a":2},{"b":{"a":3}}]`, ""},
		{"strings in an array are no keys", `{"a":["a","A","a"]}`, ""},
		{"braces and quotes inside strings", `{"a":"}{\"a\":","b":"\\"}`, ""},
		{"a surrogate pair", `{"a":"\ud83d\ude00"}`, ""},
		{"not UTF-8", "{\"a\":\"\xff\"}", "UTF-8"},
		{"a lone high surrogate", `{"a":"\ud800"}`, "surrogate"},
		{"a high surrogate and no low", `{"a":"\ud800\u0041"}`, "surrogate"},
		{"a lone low surrogate", `{"a":"\udc00"}`, "surrogate"},
		{"a key twice", `{"a":1,"a":2}`, "appears twice"},
		{"a key twice in case", `{"policy":[{"action":"deny"}],"Policy":[]}`, "appears twice"},
		{"a key twice by an escape", `{"a":1,"\u0061":2}`, "appears twice"},
		{"the Kelvin sign folds with k", `{"k":1,"\u212a":2}`, "appears twice"},
		{"a nested key twice", `{"a":{"b":1,"B":2}}`, "appears twice"},
		{"a key twice past the map's threshold", many("K03"), "appears twice"},
		{"many keys, none twice", many("k99"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.in))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check(%s) = %v, want nil", tc.in, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check(%s) = %v, want an error with %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestFoldKey(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"Policy", "policy"}, {"K", "\u212a"}, {"ſ", "s"}, {"Ünïcode", "üNÏCODE"},
	} {
		if FoldKey(tc.a) != FoldKey(tc.b) {
			t.Errorf("FoldKey(%q) = %q, FoldKey(%q) = %q: want one", tc.a, FoldKey(tc.a), tc.b, FoldKey(tc.b))
		}
	}
	if FoldKey("a") == FoldKey("b") {
		t.Error("FoldKey folds a and b together")
	}
}

// FuzzCheck compares Check's verdict on keys with one read by
// encoding/json's own tokenizer, for text both accept.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1,"A":2}`, `[{"a":{"b":[1,{"c":"\u0063"}]}}]`, `{"k":1,"\u212a":2}`, `"x"`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b) // must not panic, whatever b is
		if !json.Valid(b) || Valid(b) != nil {
			return
		}
		dup, rerr := dupByTokens(b)
		if rerr != nil {
			t.Skip()
		}
		if dup != (err != nil) {
			t.Fatalf("Check(%q) = %v, the tokenizer finds a key twice: %v", b, err, dup)
		}
	})
}

// dupByTokens reports whether an object in b has two keys that FoldKey
// makes one.
func dupByTokens(b []byte) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type obj struct {
		keys    map[string]bool
		wantKey bool
	}
	var stack []*obj
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		top := func() *obj {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if o := top(); o != nil && o.keys != nil {
					o.wantKey = true
				}
				stack = append(stack, &obj{keys: map[string]bool{}, wantKey: true})
			case '[':
				if o := top(); o != nil && o.keys != nil {
					o.wantKey = true
				}
				stack = append(stack, &obj{})
			default:
				stack = stack[:len(stack)-1]
			}
		default:
			o := top()
			if o == nil || o.keys == nil {
				continue
			}
			if o.wantKey {
				k := FoldKey(v.(string))
				if o.keys[k] {
					return true, nil
				}
				o.keys[k] = true
				o.wantKey = false
			} else {
				o.wantKey = true
			}
		}
	}
}
