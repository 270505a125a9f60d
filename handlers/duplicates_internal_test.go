package handlers

import "testing"

func TestDuplicateKey(t *testing.T) {
	for _, tt := range []struct {
		body        string
		found       bool
		path, again string
	}{
		{`{"a":1,"b":2}`, false, "", ""},
		{`{"a":1,"a":2}`, true, "a", "a"},
		{`{"a":1,"A":2}`, true, "a", "A"},
		{`{"K":1,"\u212a":2}`, true, "K", "\u212a"}, // the Kelvin sign folds to K
		{`{"a":{"b":1},"b":2}`, false, "", ""},      // one b in each object
		{`{"a":{"b":1,"b":2}}`, true, "a.b", "b"},
		{`{"a":[{"x":1},{"x":1,"y":[0,{"z":1,"z":2}]}]}`, true, "a[1].y[1].z", "z"},
		{`[{"a":1},{"a":1}]`, false, "", ""},
		{`[0,{"a":1,"a":1}]`, true, "[1].a", "a"},
		{`{"a":"a","b":"a"}`, false, "", ""}, // equal values are not keys
		{`{"":1,"":2}`, true, "", ""},
		{`"a"`, false, "", ""},
	} {
		path, again, found := duplicateKey([]byte(tt.body))
		if found != tt.found || path != tt.path || again != tt.again {
			t.Errorf("%s: got %q, %q, %v; want %q, %q, %v", tt.body, path, again, found, tt.path, tt.again, tt.found)
		}
	}
}
