package workload_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

// TestShapes: the Ordered shape writes the hosts in ascending key order
// with two upstreams each, one among 20 addresses; the Random shape writes
// them in a random order (every host once), with 1 to 3 upstreams each
// from a wide address space. Mutation caught: Initial ignoring Shape (the
// random bucket's keys arrive sorted, with two upstreams each).
func TestShapes(t *testing.T) {
	_, nc := natstest.Start(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const hosts = 400
	read := func(shape workload.Shape) (keys []string, ups [][]string) {
		bucket := "shape_" + shape.String()
		if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket}); err != nil {
			t.Fatal(err)
		}
		w := &workload.Writer{JS: js, Bucket: bucket, Hosts: hosts, Rand: rand.New(rand.NewPCG(1, 2)), Shape: shape}
		if err := w.Initial(context.Background()); err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(context.Background(), "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= hosts; seq++ {
			m, err := s.GetMsg(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, strings.TrimPrefix(m.Subject, "$KV."+bucket+"."))
			var v struct {
				Upstreams []struct{ Addr string } `json:"upstreams"`
			}
			if json.Unmarshal(m.Data, &v) != nil {
				continue // one in twenty is malformed on purpose
			}
			var as []string
			for _, u := range v.Upstreams {
				as = append(as, u.Addr)
			}
			ups = append(ups, as)
		}
		return keys, ups
	}
	keys, ups := read(workload.Ordered)
	if !slices.IsSorted(keys) {
		t.Errorf("ordered shape: keys not ascending: %v…", keys[:5])
	}
	few := map[string]bool{}
	for _, as := range ups {
		if len(as) != 2 {
			t.Fatalf("ordered shape: %d upstreams: %v", len(as), as)
		}
		few[as[1]] = true
	}
	if len(few) > 20 {
		t.Errorf("ordered shape: %d second addresses, want at most 20", len(few))
	}

	keys, ups = read(workload.Random)
	if slices.IsSorted(keys) || len(keys) != hosts {
		t.Errorf("random shape: %d keys, sorted %v", len(keys), slices.IsSorted(keys))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != hosts {
		t.Errorf("random shape: a host written twice or missed")
	}
	addrs, counts := map[string]bool{}, map[int]int{}
	for _, as := range ups {
		counts[len(as)]++
		for _, a := range as {
			addrs[a] = true
		}
	}
	if counts[1] == 0 || counts[2] == 0 || counts[3] == 0 || len(counts) != 3 {
		t.Errorf("random shape: upstreams per host %v, want 1 to 3", counts)
	}
	if n := len(ups); len(addrs) < n { // ~2 upstreams a host from 16M addresses: nearly all distinct
		t.Errorf("random shape: %d distinct addresses over %d hosts", len(addrs), n)
	}
}
