package router

import (
	"strconv"
	"strings"
	"testing"
)

// Native tests of the scanner; the conformance suite (host/wasm) runs the
// same rules through every build of the plugin.
func TestParseEntry(t *testing.T) {
	deep := strings.Repeat(`[`, 64) + strings.Repeat(`]`, 64)
	tooDeep := strings.Repeat(`[`, 65) + strings.Repeat(`]`, 65)
	for _, c := range []struct {
		in   string
		want string // resolved entry, or "" for rejected
	}{
		{`{"upstreams":[{"addr":"a:1","weight":3},{"addr":"b:2"}]}`, "a:1=3,b:2=1"},
		{` {"x":{"y":[1,2.5e3,true,null,"s\"]"]},"upstreams":[{"addr":"a:1","z":[]}]} `, "a:1=1"},
		{`{"upstreams":[{"addr":"a:1","weight":1000}]}`, "a:1=1000"},
		{`{"upstreams":[{"addr":"a:1","weight":1001}]}`, ""},
		{`{"upstreams":[{"addr":"a:1","weight":0}]}`, ""},
		{`{"upstreams":[{"addr":"a:1","weight":1.0}]}`, ""},
		{`{"upstreams":[{"addr":"a:1","weight":-1}]}`, ""},
		{`{"upstreams":[{"addr":"a:1","weight":null}]}`, ""},
		{`{"upstreams":[]}`, ""},
		{`{"upstreams":[{"weight":2}]}`, ""},
		{`{"upstreams":[{"addr":"a,b"}]}`, ""},
		{`{"upstreams":[{"addr":"a\u0031"}]}`, ""},
		{`{"upstreams":[{"addr":"a:1"}],"upstreams":[{"addr":"b:1"}]}`, ""},
		{`{"upstreams":[{"addr":"a:1","addr":"b:1"}]}`, ""},
		{`{"up\u0073treams":[{"addr":"a:1"}]}`, ""}, // escaped name: unknown field, so no upstreams
		{`{"Upstreams":[{"addr":"a:1"}]}`, ""},
		{`{"upstreams":[{"addr":"a:1"}]} x`, ""},
		{`{"upstreams":[{"addr":"a:1"}]`, ""},
		{`{"d":` + deep + `,"upstreams":[{"addr":"a:1"}]}`, "a:1=1"},
		{`{"d":` + tooDeep + `,"upstreams":[{"addr":"a:1"}]}`, ""},
		{`[]`, ""},
		{``, ""},
	} {
		ups, ok := parseEntry([]byte(c.in), nil)
		var got string
		if ok {
			for i, u := range ups {
				if i > 0 {
					got += ","
				}
				got += string(u.addr) + "=" + strconv.Itoa(u.weight)
			}
		}
		if got != c.want {
			t.Errorf("parseEntry(%.60q) = %q, want %q", c.in, got, c.want)
		}
	}
}
