package protocol_test

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/protocol"
)

// Encodings of Revision, Cursor, PointerState and RepairMode: exact bytes,
// round trips, and every rejection path. Decoders must leave their target
// untouched on error.

var (
	_ encoding.BinaryMarshaler   = protocol.Revision(0)
	_ encoding.BinaryAppender    = protocol.Revision(0)
	_ encoding.BinaryUnmarshaler = (*protocol.Revision)(nil)
	_ encoding.TextMarshaler     = protocol.Revision(0)
	_ encoding.TextUnmarshaler   = (*protocol.Revision)(nil)
	_ encoding.BinaryMarshaler   = protocol.Cursor{}
	_ encoding.BinaryAppender    = protocol.Cursor{}
	_ encoding.BinaryUnmarshaler = (*protocol.Cursor)(nil)
	_ encoding.TextMarshaler     = protocol.PointerState{}
	_ encoding.TextUnmarshaler   = (*protocol.PointerState)(nil)
	_ encoding.TextMarshaler     = protocol.RepairMode(0)
	_ encoding.TextUnmarshaler   = (*protocol.RepairMode)(nil)
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func TestRevisionBinary(t *testing.T) {
	tests := []struct {
		name string
		r    protocol.Revision
		hex  string
	}{
		{"zero (NoRevision)", 0, "0000000000000000"},
		{"one", 1, "0000000000000001"},
		{"255: low byte full", 255, "00000000000000ff"},
		{"256: carries into second byte (big-endian)", 256, "0000000000000100"},
		{"2^32", 1 << 32, "0000000100000000"},
		{"max-1", maxRev - 1, "fffffffffffffffe"},
		{"max", maxRev, "ffffffffffffffff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			got, err := tt.r.MarshalBinary()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("MarshalBinary() = %x, %v; want %x", got, err, want)
			}
			prefix := []byte("pfx")
			app, err := tt.r.AppendBinary(prefix)
			if err != nil || !bytes.Equal(app, append([]byte("pfx"), want...)) {
				t.Fatalf("AppendBinary(pfx) = %x, %v; want prefix kept then %x", app, err, want)
			}
			var back protocol.Revision
			if err := back.UnmarshalBinary(got); err != nil || back != tt.r {
				t.Fatalf("UnmarshalBinary(%x) = %d, %v; want %d", got, back, err, tt.r)
			}
		})
	}
}

func TestRevisionBinarySortsLikeNumbers(t *testing.T) {
	revs := []protocol.Revision{0, 1, 2, 255, 256, 65535, 65536, 1 << 32, 1<<63 - 1, 1 << 63, maxRev - 1, maxRev}
	for i, a := range revs {
		for _, b := range revs[i:] {
			ea, _ := a.MarshalBinary()
			eb, _ := b.MarshalBinary()
			cmp := bytes.Compare(ea, eb)
			if (a < b && cmp >= 0) || (a == b && cmp != 0) {
				t.Errorf("encodings of %d and %d compare %d", a, b, cmp)
			}
		}
	}
}

func TestRevisionUnmarshalBinaryRejects(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"1 byte", []byte{1}},
		{"7 bytes: one short", make([]byte, 7)},
		{"9 bytes: one trailing", make([]byte, 9)},
		{"16 bytes: two revisions", make([]byte, 16)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := protocol.Revision(42)
			if err := r.UnmarshalBinary(tt.b); err == nil {
				t.Fatalf("UnmarshalBinary(%x) accepted: %d", tt.b, r)
			}
			if r != 42 {
				t.Errorf("target modified on error: %d", r)
			}
		})
	}
}

func TestRevisionText(t *testing.T) {
	tests := []struct {
		name string
		r    protocol.Revision
		text string
	}{
		{"zero", 0, "0"},
		{"one", 1, "1"},
		{"decimal, not hex", 255, "255"},
		{"max", maxRev, "18446744073709551615"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.r.MarshalText()
			if err != nil || string(got) != tt.text {
				t.Fatalf("MarshalText() = %q, %v; want %q", got, err, tt.text)
			}
			if s := tt.r.String(); s != tt.text {
				t.Errorf("String() = %q, want %q", s, tt.text)
			}
			var back protocol.Revision
			if err := back.UnmarshalText(got); err != nil || back != tt.r {
				t.Fatalf("UnmarshalText(%q) = %d, %v; want %d", got, back, err, tt.r)
			}
		})
	}
}

func TestRevisionUnmarshalText(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    protocol.Revision
		wantErr bool
	}{
		{"leading zeros accepted (non-canonical; pinned)", "007", 7, false},
		{"all zeros", "000", 0, false},
		{"empty", "", 0, true},
		{"negative", "-1", 0, true},
		{"plus sign", "+1", 0, true},
		{"leading space", " 1", 0, true},
		{"trailing space", "1 ", 0, true},
		{"trailing newline", "1\n", 0, true},
		{"hex prefix", "0x10", 0, true},
		{"underscore separator", "1_000", 0, true},
		{"decimal point", "1.0", 0, true},
		{"word", "abc", 0, true},
		{"max+1 overflows", "18446744073709551616", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := protocol.Revision(42)
			err := r.UnmarshalText([]byte(tt.text))
			switch {
			case tt.wantErr && err == nil:
				t.Fatalf("UnmarshalText(%q) accepted: %d", tt.text, r)
			case tt.wantErr && r != 42:
				t.Fatalf("target modified on error: %d", r)
			case !tt.wantErr && (err != nil || r != tt.want):
				t.Fatalf("UnmarshalText(%q) = %d, %v; want %d", tt.text, r, err, tt.want)
			}
		})
	}
}

func TestCursorBinaryRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    protocol.Cursor
		hex  string
	}{
		{"zero cursor: compact, all zero", protocol.Cursor{}, "0000000000000000"},
		{"rev 1: compact", protocol.Cursor{Rev: 1}, "0000000000000001"},
		{"rev 256: compact big-endian", protocol.Cursor{Rev: 256}, "0000000000000100"},
		{"rev max: compact", protocol.Cursor{Rev: maxRev}, "ffffffffffffffff"},
		{"memo at rev 0: 10-byte extended", protocol.Cursor{EvictionSeen: true}, "01 01 0000000000000000"},
		{"memo at rev 5: 10-byte extended", protocol.Cursor{Rev: 5, EvictionSeen: true}, "01 01 0000000000000005"},
		{"memo at rev max", protocol.Cursor{Rev: maxRev, EvictionSeen: true}, "01 01 ffffffffffffffff"},
		{"time 1 at rev 5: 18-byte extended", protocol.Cursor{Rev: 5, MsgUnixNano: 1}, "01 02 0000000000000005 0000000000000001"},
		{"time at rev 0", protocol.Cursor{MsgUnixNano: 1}, "01 02 0000000000000000 0000000000000001"},
		{"memo and time: flags 3", protocol.Cursor{Rev: 5, EvictionSeen: true, MsgUnixNano: 1_700_000_000_000_000_000},
			"01 03 0000000000000005 17979cfe362a0000"},
		{"time -1 (two's complement)", protocol.Cursor{Rev: 5, MsgUnixNano: -1}, "01 02 0000000000000005 ffffffffffffffff"},
		{"time min int64", protocol.Cursor{Rev: 5, MsgUnixNano: math.MinInt64}, "01 02 0000000000000005 8000000000000000"},
		{"time max int64", protocol.Cursor{Rev: 5, MsgUnixNano: math.MaxInt64}, "01 02 0000000000000005 7fffffffffffffff"},
		{"everything at max", protocol.Cursor{Rev: maxRev, EvictionSeen: true, MsgUnixNano: math.MaxInt64},
			"01 03 ffffffffffffffff 7fffffffffffffff"},
		{"unsettled: flags 4, settled last", protocol.Cursor{Rev: 9, Unsettled: true, Settled: 5}, "01 04 0000000000000009 0000000000000005"},
		{"unsettled at settled 0", protocol.Cursor{Rev: 9, Unsettled: true}, "01 04 0000000000000009 0000000000000000"},
		{"memo, time and unsettled: flags 7, 26 bytes", protocol.Cursor{Rev: 9, EvictionSeen: true, MsgUnixNano: 1, Unsettled: true, Settled: 8},
			"01 07 0000000000000009 0000000000000001 0000000000000008"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			got, err := tt.c.MarshalBinary()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("MarshalBinary() = %x, %v; want %x", got, err, want)
			}
			if !tt.c.EvictionSeen && tt.c.MsgUnixNano == 0 && !tt.c.Unsettled {
				// A plain cursor is exactly the bare revision.
				rb, _ := tt.c.Rev.MarshalBinary()
				if !bytes.Equal(got, rb) || len(got) != 8 {
					t.Fatalf("compact form %x != revision bytes %x", got, rb)
				}
			} else if wantLen := 10 + map[bool]int{false: 0, true: 8}[tt.c.MsgUnixNano != 0] + map[bool]int{false: 0, true: 8}[tt.c.Unsettled]; len(got) != wantLen {
				t.Fatalf("extended form is %d bytes, want %d", len(got), wantLen)
			}
			app, err := tt.c.AppendBinary([]byte{0xAA, 0xBB})
			if err != nil || !bytes.Equal(app, append([]byte{0xAA, 0xBB}, want...)) {
				t.Fatalf("AppendBinary(prefix) = %x, %v", app, err)
			}
			var back protocol.Cursor
			if err := back.UnmarshalBinary(got); err != nil || back != tt.c {
				t.Fatalf("UnmarshalBinary(%x) = %+v, %v; want %+v", got, back, err, tt.c)
			}
		})
	}
}

// A cursor that is not canonical (a settled point at or past its position,
// or one without the flag) cannot be encoded: it would read back as another.
func TestCursorMarshalRefusesNonCanonical(t *testing.T) {
	for _, c := range []protocol.Cursor{
		{Rev: 5, Unsettled: true, Settled: 5},
		{Rev: 5, Unsettled: true, Settled: 6},
		{Rev: 5, Settled: 3},
	} {
		if b, err := c.MarshalBinary(); !errors.Is(err, protocol.ErrCursorEncoding) {
			t.Errorf("MarshalBinary(%+v) = %x, %v; want ErrCursorEncoding", c, b, err)
		}
	}
}

func TestCursorUnmarshalBinaryOverwrites(t *testing.T) {
	// A successful decode replaces every field, including ones the encoding
	// leaves out.
	c := protocol.Cursor{Rev: 9, EvictionSeen: true, MsgUnixNano: 77}
	if err := c.UnmarshalBinary(unhex(t, "0000000000000003")); err != nil {
		t.Fatal(err)
	}
	if c != (protocol.Cursor{Rev: 3}) {
		t.Fatalf("compact decode left stale fields: %+v", c)
	}
	c = protocol.Cursor{Rev: 9, EvictionSeen: true, MsgUnixNano: 77}
	if err := c.UnmarshalBinary(unhex(t, "01 01 0000000000000004")); err != nil {
		t.Fatal(err)
	}
	if c != (protocol.Cursor{Rev: 4, EvictionSeen: true}) {
		t.Fatalf("memo decode left stale time: %+v", c)
	}
}

func TestCursorUnmarshalBinaryRejects(t *testing.T) {
	rev := "0000000000000005"
	tests := []struct {
		name    string
		hex     string
		errFrag string // which rejection path must fire
	}{
		{"empty", "", "0 bytes"},
		{"1 byte", "01", "1 bytes"},
		{"7 bytes: short compact", "00000000000005", "7 bytes"},
		{"9 bytes: between forms", "01" + rev, "9 bytes"},
		{"10 bytes, version 0", "00 01" + rev, "unknown version 0"},
		{"10 bytes, version 2 (newer foldhost)", "02 01" + rev, "unknown version 2"},
		{"10 bytes, version 255", "ff 01" + rev, "unknown version 255"},
		{"18 bytes, version 2", "02 02" + rev + "0000000000000001", "unknown version 2"},
		{"unknown flag bit 3", "01 08" + rev, "unknown flags 0x8"},
		{"unknown flag bit 7", "01 80" + rev, "unknown flags 0x80"},
		{"known and unknown flags", "01 09" + rev, "unknown flags 0x9"},
		{"all flags", "01 ff" + rev + "0000000000000001", "unknown flags 0xff"},
		{"non-canonical: extended without memo or time", "01 00" + rev, "without memo, time or settled"},
		{"non-canonical: settled at the position", "01 04" + rev + rev, "settled 5 is not below the position 5"},
		{"non-canonical: settled past the position", "01 04" + rev + "0000000000000006", "settled 6 is not below the position 5"},
		{"unsettled flag, settled missing", "01 04" + rev, "need 18 bytes, got 10"},
		{"unsettled and time, settled missing", "01 06" + rev + "0000000000000001", "need 26 bytes, got 18"},
		{"non-canonical: time flagged but zero", "01 02" + rev + "0000000000000000", "flagged but zero"},
		{"non-canonical: memo and zero time", "01 03" + rev + "0000000000000000", "flagged but zero"},
		{"memo form with trailing time bytes (18 for flags 1)", "01 01" + rev + "0000000000000001", "need 10 bytes, got 18"},
		{"time flag but 10 bytes (time missing)", "01 02" + rev, "need 18 bytes, got 10"},
		{"memo form, one trailing byte", "01 01" + rev + "00", "need 10 bytes, got 11"},
		{"time form, one short", "01 02" + rev + "00000000000001", "need 18 bytes, got 17"},
		{"time form, one trailing byte", "01 03" + rev + "0000000000000001" + "00", "need 18 bytes, got 19"},
		{"two compact cursors back to back: version byte 0", rev + rev, "unknown version 0"},
		{"flags 0 at 18 bytes", "01 00" + rev + "0000000000000001", "need 10 bytes, got 18"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := unhex(t, tt.hex)
			orig := protocol.Cursor{Rev: 42, EvictionSeen: true, MsgUnixNano: 7}
			c := orig
			err := c.UnmarshalBinary(b)
			if err == nil {
				t.Fatalf("UnmarshalBinary(%x) accepted: %+v", b, c)
			}
			if !errors.Is(err, protocol.ErrCursorEncoding) {
				t.Errorf("error %v does not wrap ErrCursorEncoding", err)
			}
			if !strings.Contains(err.Error(), tt.errFrag) {
				t.Errorf("error %q: want the %q path", err, tt.errFrag)
			}
			if c != orig {
				t.Errorf("target modified on error: %+v", c)
			}
		})
	}
}

// TestCursorDecodeVersionFlagsExhaustive decodes every (version, flags) pair
// at both extended lengths: exactly the canonical combinations are accepted.
func TestCursorDecodeVersionFlagsExhaustive(t *testing.T) {
	for version := range 256 {
		for flags := range 256 {
			for _, n := range []int{10, 18, 26} {
				b := make([]byte, n)
				b[0], b[1] = byte(version), byte(flags)
				binary.BigEndian.PutUint64(b[2:], 5)
				for i := 10; i < n; i += 8 {
					binary.BigEndian.PutUint64(b[i:], 1) // a time, or a settled revision below 5
				}
				var c protocol.Cursor
				err := c.UnmarshalBinary(b)
				want := version == 1 && ((n == 10 && flags == 1) || (n == 18 && flags >= 2 && flags <= 5) || (n == 26 && (flags == 6 || flags == 7)))
				if (err == nil) != want {
					t.Fatalf("UnmarshalBinary(%x) err = %v, want accepted=%v", b, err, want)
				}
				if err == nil {
					enc, _ := c.MarshalBinary()
					if !bytes.Equal(enc, b) {
						t.Fatalf("accepted %x re-encodes as %x", b, enc)
					}
				}
			}
		}
	}
}

func TestPointerStateText(t *testing.T) {
	tests := []struct {
		name string
		p    protocol.PointerState
		text string
	}{
		{"absent", protocol.PointerAbsent(), "absent"},
		{"corrupt", protocol.PointerCorrupt(), "corrupt"},
		{"rank 0", protocol.PointerAt(0), "rank:0"},
		{"rank 1", protocol.PointerAt(1), "rank:1"},
		{"rank max", protocol.PointerAt(maxRev), "rank:18446744073709551615"},
		{"rank 7 at epoch 3", protocol.PointerAtEpoch(7, 3), "rank:7@3"},
		{"epoch 0 is no epoch", protocol.PointerAtEpoch(7, 0), "rank:7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.MarshalText()
			if err != nil || string(got) != tt.text {
				t.Fatalf("MarshalText() = %q, %v; want %q", got, err, tt.text)
			}
			if s := tt.p.String(); s != tt.text {
				t.Errorf("String() = %q, want %q", s, tt.text)
			}
			back := protocol.PointerAt(42)
			if err := back.UnmarshalText(got); err != nil || back != tt.p {
				t.Fatalf("UnmarshalText(%q) = %v, %v; want %v", got, back, err, tt.p)
			}
		})
	}
}

func TestPointerStateUnmarshalText(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    protocol.PointerState
		wantErr bool
	}{
		{"leading zeros in rank accepted (non-canonical; pinned)", "rank:007", protocol.PointerAt(7), false},
		{"empty", "", protocol.PointerState{}, true},
		{"capitalised", "Absent", protocol.PointerState{}, true},
		{"upper case", "CORRUPT", protocol.PointerState{}, true},
		{"leading space", " absent", protocol.PointerState{}, true},
		{"trailing newline", "absent\n", protocol.PointerState{}, true},
		{"rank without number", "rank:", protocol.PointerState{}, true},
		{"rank with space separator", "rank 5", protocol.PointerState{}, true},
		{"rank without colon", "rank5", protocol.PointerState{}, true},
		{"rank negative", "rank:-1", protocol.PointerState{}, true},
		{"rank with sign", "rank:+1", protocol.PointerState{}, true},
		{"rank hex", "rank:0x10", protocol.PointerState{}, true},
		{"rank overflow", "rank:18446744073709551616", protocol.PointerState{}, true},
		{"rank trailing garbage", "rank:5x", protocol.PointerState{}, true},
		{"bare number", "5", protocol.PointerState{}, true},
		{"present is not a state", "present", protocol.PointerState{}, true},
		{"epoch without number", "rank:5@", protocol.PointerState{}, true},
		{"epoch 0 written out", "rank:5@0", protocol.PointerState{}, true},
		{"epoch twice", "rank:5@1@2", protocol.PointerState{}, true},
		{"epoch without rank", "rank:@2", protocol.PointerState{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := protocol.PointerAt(42)
			err := p.UnmarshalText([]byte(tt.text))
			switch {
			case tt.wantErr && err == nil:
				t.Fatalf("UnmarshalText(%q) accepted: %v", tt.text, p)
			case tt.wantErr && p != protocol.PointerAt(42):
				t.Fatalf("target modified on error: %v", p)
			case !tt.wantErr && (err != nil || p != tt.want):
				t.Fatalf("UnmarshalText(%q) = %v, %v; want %v", tt.text, p, err, tt.want)
			}
		})
	}
}

func TestRepairModeText(t *testing.T) {
	tests := []struct {
		name string
		m    protocol.RepairMode
		text string
	}{
		{"none", protocol.RepairNone, "none"},
		{"relist", protocol.RepairRelist, "relist"},
		{"restore", protocol.RepairRestore, "restore"},
		{"auto", protocol.RepairAuto, "auto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.m.MarshalText()
			if err != nil || string(got) != tt.text {
				t.Fatalf("MarshalText() = %q, %v; want %q", got, err, tt.text)
			}
			back := protocol.RepairMode(200)
			if err := back.UnmarshalText(got); err != nil || back != tt.m {
				t.Fatalf("UnmarshalText(%q) = %v, %v; want %v", got, back, err, tt.m)
			}
		})
	}
}

func TestRepairModeTextRejects(t *testing.T) {
	t.Run("marshal out-of-range mode 4", func(t *testing.T) {
		if b, err := protocol.RepairMode(4).MarshalText(); err == nil {
			t.Fatalf("MarshalText accepted mode 4: %q", b)
		}
	})
	t.Run("marshal out-of-range mode 255", func(t *testing.T) {
		if b, err := protocol.RepairMode(255).MarshalText(); err == nil {
			t.Fatalf("MarshalText accepted mode 255: %q", b)
		}
	})
	tests := []struct{ name, text string }{
		{"empty", ""},
		{"capitalised None", "None"},
		{"upper case AUTO", "AUTO"},
		{"leading space", " auto"},
		{"trailing space", "auto "},
		{"trailing newline", "auto\n"},
		{"name with suffix", "restore2"},
		{"number 0", "0"},
		{"number 3", "3"},
		{"plan name, not a mode", "relist-only"},
		{"String of an out-of-range mode", "RepairMode(4)"},
	}
	for _, tt := range tests {
		t.Run("unmarshal "+tt.name, func(t *testing.T) {
			m := protocol.RepairAuto
			if err := m.UnmarshalText([]byte(tt.text)); err == nil {
				t.Fatalf("UnmarshalText(%q) accepted: %v", tt.text, m)
			}
			if m != protocol.RepairAuto {
				t.Errorf("target modified on error: %v", m)
			}
		})
	}
}

// FuzzCursorDecode: decoding never panics; a rejected input is an
// ErrCursorEncoding and leaves the target untouched; an accepted input is
// canonical (it re-encodes to exactly itself), and decode→encode→decode is
// stable.
func FuzzCursorDecode(f *testing.F) {
	for _, c := range []protocol.Cursor{
		{}, {Rev: 1}, {Rev: maxRev},
		{EvictionSeen: true}, {Rev: 5, EvictionSeen: true},
		{Rev: 5, MsgUnixNano: 1}, {Rev: 5, MsgUnixNano: -1},
		{Rev: maxRev, EvictionSeen: true, MsgUnixNano: math.MinInt64},
		{Rev: 9, Unsettled: true, Settled: 3}, {Rev: 9, Unsettled: true, Settled: 3, MsgUnixNano: 5, EvictionSeen: true},
	} {
		b, _ := c.MarshalBinary()
		f.Add(b)
	}
	for _, h := range []string{
		"", "01", "0101", "01000000000000000005", "01020000000000000005",
		"010200000000000000050000000000000000", "01040000000000000005", "02010000000000000005",
		"0101000000000000000500", "ffffffffffffffffffffffffffffffffffff",
	} {
		f.Add(unhex(f, h))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := protocol.Cursor{Rev: 42, EvictionSeen: true, MsgUnixNano: 7}
		c := orig
		if err := c.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, protocol.ErrCursorEncoding) {
				t.Fatalf("error %v does not wrap ErrCursorEncoding", err)
			}
			if c != orig {
				t.Fatalf("target modified on error: %+v", c)
			}
			if len(b) == 8 {
				t.Fatalf("8-byte input %x rejected: every 8 bytes is a compact cursor", b)
			}
			return
		}
		switch len(b) {
		case 8, 10, 18, 26: // compact; extended: + message time, + settled revision, + both
		default:
			t.Fatalf("accepted a %d-byte input %x", len(b), b)
		}
		enc, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary(%+v): %v", c, err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("non-canonical input accepted: %x decodes to %+v, which encodes as %x", b, c, enc)
		}
		var again protocol.Cursor
		if err := again.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-decode of %x: %v", enc, err)
		}
		if again != c {
			t.Fatalf("decode→encode→decode unstable: %+v -> %x -> %+v", c, enc, again)
		}
	})
}
