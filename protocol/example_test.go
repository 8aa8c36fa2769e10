package protocol_test

import (
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// A fold checks its cursor against the stream's retained window (NATS stream
// info FirstSeq/LastSeq) before it resumes: NATS itself would silently clamp
// an expired cursor and silently skip past a cursor beyond the head.
func ExampleCheckResume() {
	w := protocol.Window{First: 100, Last: 250} // revisions 1..99 were evicted
	for _, cursor := range []protocol.Revision{250, 99, 42, 300, protocol.MaxRevision} {
		switch v := protocol.CheckResume(cursor, w); v {
		case protocol.ResumeOK:
			fmt.Printf("cursor %d: %v, watch from %d\n", cursor, v, cursor+1)
		case protocol.ResumeExpired:
			fmt.Printf("cursor %d: %v, run the cursor-expiry repair\n", cursor, v)
		default:
			fmt.Printf("cursor %d: %v, refuse to resume\n", cursor, v)
		}
	}
	// Output:
	// cursor 250: ok, watch from 251
	// cursor 99: ok, watch from 100
	// cursor 42: expired, run the cursor-expiry repair
	// cursor 300: beyond-head, refuse to resume
	// cursor 18446744073709551615: at-max, refuse to resume
}

// After the plugin returned success for a batch, the loop computes the cursor
// to commit in the same store batch as the data: the highest revision seen,
// never backward, with unknown revisions (synthetic repair deletes) ignored.
func ExampleCursorAfterBatch() {
	const msgTime = 1_700_000_000_000_000_000 // server time of revision 14

	// Every revision of the batch counts, rejected or not; unknown ones
	// (NoRevision) neither mint nor lower the position.
	prev := protocol.Cursor{Rev: 10}
	next := protocol.CursorAfterBatch(prev, []protocol.Revision{12, protocol.NoRevision, 11, 14}, msgTime)
	fmt.Println(next, next.MsgUnixNano)

	// Without the eviction memo the cursor keeps no message time, so it
	// encodes as the bare 8-byte revision.
	plain, _ := next.MarshalBinary()
	fmt.Printf("%x\n", plain)

	// With the memo it keeps the time GapHoldsNoEviction needs.
	memo := protocol.CursorAfterBatch(protocol.Cursor{Rev: 10, EvictionSeen: true}, []protocol.Revision{14}, msgTime)
	fmt.Println(memo, memo.MsgUnixNano)

	// A replayed batch below the cursor leaves it (and its time) alone.
	fmt.Println(protocol.CursorAfterBatch(memo, []protocol.Revision{13, 14}, 5) == memo)
	// Output:
	// 14 0
	// 000000000000000e
	// 14+evicted 1700000000000000000
	// true
}
