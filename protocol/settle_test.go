package protocol_test

import (
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

func TestSettleDelivered(t *testing.T) {
	const now int64 = 1_700_000_000_000_000_000
	discardOld := func(first protocol.Revision) protocol.Retention {
		return protocol.Retention{Window: protocol.Window{First: first, Last: 100}, DiscardOldLimit: true}
	}
	ageOnly := protocol.Retention{Window: protocol.Window{First: 50, Last: 100}, MaxAge: time.Hour}
	for _, tc := range []struct {
		name               string
		settled, delivered protocol.Revision
		r                  protocol.Retention
		settledNS          int64
		want               protocol.Revision
		ok                 bool
	}{
		{"nothing evicted: settles the deliveries", 10, 40, discardOld(1), 0, 40, true},
		{"first at settled+1: still nothing evicted above it", 10, 40, discardOld(11), 0, 40, true},
		{"first past settled+1: maybe clamped", 10, 40, discardOld(12), 0, 10, false},
		{"first past every delivery: clamped", 10, 40, discardOld(60), 0, 10, false},
		{"nothing delivered since: stays", 40, 40, discardOld(30), 0, 40, true},
		{"deliveries below the settled point never lower it", 40, 30, discardOld(1), 0, 40, true},
		{"age-only, settled message young: superseded, not evicted", 10, 40, ageOnly, now - int64(time.Minute), 40, true},
		{"age-only, settled message old: maybe evicted", 10, 40, ageOnly, now - int64(time.Hour), 10, false},
		{"age-only, time unknown: maybe evicted", 10, 40, ageOnly, 0, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := protocol.SettleDelivered(tc.settled, tc.delivered, tc.r, tc.settledNS, now)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("SettleDelivered(%d, %d, first %d) = %d, %v; want %d, %v", tc.settled, tc.delivered, tc.r.First, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSettleQuiet(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		settled, head, next, firstAfter protocol.Revision
		want                            protocol.Revision
	}{
		{"nothing of the scope up to the head", 10, 50, 0, 5, 50},
		{"the scope's next message above the head", 10, 50, 70, 5, 50},
		{"the scope's next message below the head: just before it", 10, 50, 30, 5, 29},
		{"the scope's next message right after: no move", 10, 50, 11, 5, 10},
		{"evicted above the settled point before the lookup ran: no move", 10, 50, 0, 12, 10},
		{"first exactly settled+1: moves", 10, 50, 0, 11, 50},
		{"a head at or below the settled point: no move", 60, 50, 0, 5, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := protocol.SettleQuiet(tc.settled, tc.head, tc.next, tc.firstAfter); got != tc.want {
				t.Fatalf("SettleQuiet(%d, %d, %d, %d) = %d, want %d", tc.settled, tc.head, tc.next, tc.firstAfter, got, tc.want)
			}
		})
	}
}

func TestCheckCursorResume(t *testing.T) {
	w := protocol.Window{First: 20, Last: 100}
	for _, tc := range []struct {
		name string
		c    protocol.Cursor
		want protocol.ResumeVerdict
	}{
		{"settled inside the window", protocol.Cursor{Rev: 50}, protocol.ResumeOK},
		{"settled below the window", protocol.Cursor{Rev: 10}, protocol.ResumeExpired},
		{"unsettled, settled point inside", protocol.Cursor{Rev: 50, Unsettled: true, Settled: 19}, protocol.ResumeOK},
		{"unsettled, position inside but settled point below", protocol.Cursor{Rev: 50, Unsettled: true, Settled: 18}, protocol.ResumeExpired},
		{"beyond the head wins over an old settled point", protocol.Cursor{Rev: 101, Unsettled: true, Settled: 5}, protocol.ResumeBeyondHead},
		{"at max", protocol.Cursor{Rev: maxRev, Unsettled: true, Settled: 50}, protocol.ResumeAtMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := protocol.CheckCursorResume(tc.c, w); got != tc.want {
				t.Fatalf("CheckCursorResume(%v) = %v, want %v", tc.c, got, tc.want)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	const t1 int64 = 1_700_000_000_000_000_000
	for _, tc := range []struct {
		name     string
		c        protocol.Cursor
		settled  protocol.Revision
		complete bool
		want     protocol.Cursor
	}{
		{"settled at the position", protocol.Cursor{Rev: 10}, 10, true, protocol.Cursor{Rev: 10}},
		{"settled below: unsettled", protocol.Cursor{Rev: 10}, 7, true, protocol.Cursor{Rev: 10, Unsettled: true, Settled: 7}},
		{"settled below at 0", protocol.Cursor{Rev: 10}, 0, true, protocol.Cursor{Rev: 10, Unsettled: true}},
		{"an unsettled cursor settles", protocol.Cursor{Rev: 10, Unsettled: true, Settled: 7}, 10, true, protocol.Cursor{Rev: 10}},
		{"complete: the position moves up to the settled point", protocol.Cursor{Rev: 10}, 30, true, protocol.Cursor{Rev: 30}},
		{"incomplete: it does not", protocol.Cursor{Rev: 10}, 30, false, protocol.Cursor{Rev: 10}},
		{"moved with the memo: its time kept", protocol.Cursor{Rev: 10, EvictionSeen: true}, 30, true, protocol.Cursor{Rev: 30, EvictionSeen: true, MsgUnixNano: t1}},
		{"moved without the memo: no time", protocol.Cursor{Rev: 10, MsgUnixNano: 5}, 30, true, protocol.Cursor{Rev: 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := protocol.Settle(tc.c, tc.settled, t1, tc.complete)
			if got != tc.want {
				t.Fatalf("Settle(%+v, %d, complete %v) = %+v, want %+v", tc.c, tc.settled, tc.complete, got, tc.want)
			}
			if got.SettledRev() > got.Rev {
				t.Fatalf("settled point %d above the position %d", got.SettledRev(), got.Rev)
			}
			if _, err := got.MarshalBinary(); err != nil {
				t.Fatalf("not encodable: %v", err)
			}
		})
	}
}
