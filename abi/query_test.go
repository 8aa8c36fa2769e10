package abi

import (
	"errors"
	"strings"
	"testing"
)

func TestQueryListRoundTripAndRules(t *testing.T) {
	qs := []Query{{"hosts_of_upstream", "application/json"}, {"a.b-c_9", ""}}
	got, err := DecodeQueries(AppendQueries(nil, qs))
	if err != nil || len(got) != 2 || got[0] != qs[0] || got[1] != qs[1] {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if got, err := DecodeQueries(AppendQueries(nil, nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
	for name, list := range map[string][]Query{
		"empty name":     {{"", ""}},
		"slash in name":  {{"a/b", ""}},
		"space in name":  {{"a b", ""}},
		"long name":      {{strings.Repeat("a", MaxQueryName+1), ""}},
		"twice":          {{"a", ""}, {"a", "text/plain"}},
		"newline in ct":  {{"a", "text/plain\r\nX: y"}},
		"long type":      {{"a", strings.Repeat("t", MaxQueryContentType+1)}},
		"too many names": make([]Query, MaxQueries+1),
	} {
		if name == "too many names" {
			for i := range list {
				list[i].Name = "q" + strings.Repeat("x", i%50) + string(rune('a'+i%26))
			}
		}
		if _, err := DecodeQueries(AppendQueries(nil, list)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := DecodeQueries(append(AppendQueries(nil, qs), 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing byte: %v", err)
	}
}

func TestQueryOutputDecoding(t *testing.T) {
	if a, err := DecodeQueryOutput(AppendQueryOutput(nil, []byte("ans")), -1); err != nil || string(a) != "ans" {
		t.Fatalf("ok: %q %v", a, err)
	}
	var ge *GuestError
	if _, err := DecodeQueryOutput(AppendQueryError(nil, "bad input here"), 3); !errors.As(err, &ge) || ge.Message != "bad" || ge.Size != 14 {
		t.Fatalf("error: %v", err)
	}
	bad := AppendQueryOutput(nil, []byte("x"))
	bad[0] = 2
	if _, err := DecodeQueryOutput(bad, -1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("status 2: %v", err)
	}
	if _, err := DecodeQueryOutput(append(AppendQueryOutput(nil, nil), 1), -1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing: %v", err)
	}
}

func TestRangeEncodings(t *testing.T) {
	f, l, s, e, err := DecodeRangeRequest(AppendRangeRequest(nil, RangeReverse, 7, []byte("a"), []byte("b")))
	if err != nil || f != RangeReverse || l != 7 || string(s) != "a" || string(e) != "b" {
		t.Fatalf("request: %v %v %q %q %v", f, l, s, e, err)
	}
	for name, req := range map[string][]byte{
		"flag 2":   AppendRangeRequest(nil, 2, 7, nil, nil),
		"limit 0":  AppendRangeRequest(nil, 0, 0, nil, nil),
		"trailing": append(AppendRangeRequest(nil, 0, 1, nil, nil), 0),
		"short":    {0, 1},
	} {
		if _, _, _, _, err := DecodeRangeRequest(req); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	body := AppendRangeEntry(AppendRangeEntry(nil, []byte("k1"), []byte("v1")), []byte("k2"), nil)
	var got []string
	more, err := DecodeRangeAnswer(AppendRangeAnswer(nil, true, 2, body), func(k, v []byte) error {
		got = append(got, string(k)+"="+string(v))
		return nil
	})
	if err != nil || !more || strings.Join(got, ",") != "k1=v1,k2=" {
		t.Fatalf("answer: %v %v %v", got, more, err)
	}
	if _, err := DecodeRangeAnswer(AppendRangeAnswer(nil, false, 3, body), func(k, v []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
		t.Fatalf("count past the body: %v", err)
	}
}
