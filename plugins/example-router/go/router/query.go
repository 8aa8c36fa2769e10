package router

import (
	"bytes"
	"errors"
	"strconv"

	foldhost "github.com/foldhost/foldhost/abi/sdk/go"
)

// Queries (ABI minor 2; SPEC.md, "Queries"): the same answers, byte for
// byte, as the C build's.
var Queries = []foldhost.QueryDef{
	{Name: "hosts_of_upstream", ContentType: "application/json", Run: hostsOfUpstream},
	{Name: "top_upstreams", ContentType: "application/json", Run: topUpstreams},
}

// queryPage is how many keys one range of top_upstreams asks for.
const queryPage = 1024

// appendJSONString appends s as a JSON string: '"' and '\' escaped,
// control characters as \u00XX, every other byte as is.
func appendJSONString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// hostsOfUpstream: input an upstream addr; answers
// {"upstream":"<addr>","hosts":["<host>",...]} in host order, from the
// reverse index (one paged prefix range over upstream/<addr>/).
func hostsOfUpstream(q *foldhost.Query, in []byte) error {
	if !validAddr(in) {
		return errors.New("hosts_of_upstream: the input must be an upstream addr (1 to 255 bytes, no ',', '=', '/' or control characters)")
	}
	hosts, err := q.IndexScan(upstreamIndex, in)
	if err != nil {
		return err
	}
	out := append(appendJSONString([]byte(`{"upstream":`), in), `,"hosts":[`...)
	for i, h := range hosts {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, h)
	}
	q.Answer(append(out, "]}"...))
	return nil
}

type ranked struct {
	addr  []byte
	hosts int
}

// rankInsert keeps top (at most max) ordered by hosts descending; addrs
// come in ascending order, so a tie keeps the earlier (smaller) addr first.
func rankInsert(top []ranked, max int, c ranked) []ranked {
	i := len(top)
	if i == max {
		if top[max-1].hosts >= c.hosts {
			return top
		}
		i = max - 1
	} else {
		top = append(top, ranked{})
	}
	for i > 0 && top[i-1].hosts < c.hosts {
		top[i] = top[i-1]
		i--
	}
	top[i] = c
	return top
}

var errCount = errors.New("top_upstreams: the input must be a count from 1 to 1000")

// topUpstreams: input n, a decimal 1..1000 (empty: 10); answers the n
// upstreams serving the most hosts, [{"addr":"<addr>","hosts":<count>},...],
// most first, ties in addr order, from one paged range over upstream/.
func topUpstreams(q *foldhost.Query, in []byte) error {
	max := 10
	if len(in) > 0 {
		if len(in) > 4 {
			return errCount
		}
		max = 0
		for _, c := range in {
			if c < '0' || c > '9' {
				return errCount
			}
			max = max*10 + int(c-'0')
		}
		if max < 1 || max > 1000 {
			return errCount
		}
	}
	prefix := []byte("upstream/")
	end := foldhost.PrefixEnd(prefix)
	start := prefix
	var top []ranked
	var cur ranked
	for {
		r, err := q.Range(start, end, queryPage, false)
		if err != nil {
			return err
		}
		for _, e := range r.Entries {
			a := e.Key[len(prefix):]
			if i := bytes.IndexByte(a, '/'); i >= 0 {
				a = a[:i]
			}
			if cur.addr != nil && bytes.Equal(cur.addr, a) {
				cur.hosts++
				continue
			}
			if cur.addr != nil {
				top = rankInsert(top, max, cur)
			}
			cur = ranked{addr: a, hosts: 1} // a lives until the query returns
		}
		if !r.More || len(r.Entries) == 0 {
			break
		}
		start = foldhost.After(r.Entries[len(r.Entries)-1].Key)
	}
	if cur.addr != nil {
		top = rankInsert(top, max, cur)
	}
	out := []byte{'['}
	for i, t := range top {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(append(out, `{"addr":`...), t.addr)
		out = strconv.AppendInt(append(out, `,"hosts":`...), int64(t.hosts), 10)
		out = append(out, '}')
	}
	q.Answer(append(out, ']'))
	return nil
}
