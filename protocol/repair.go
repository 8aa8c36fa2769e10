package protocol

import (
	"fmt"
	"strconv"
)

// RepairMode is how a fold repairs an expired cursor. Text encoding (config):
// "none", "relist", "restore", "auto".
type RepairMode uint8

const (
	// RepairNone: re-list only; keys deleted during the gap may persist.
	RepairNone RepairMode = iota
	// RepairRelist: key-listing diff, then re-list. Refused where the listing
	// is not the truth.
	RepairRelist
	// RepairRestore: restore from the newest artifact.
	RepairRestore
	// RepairAuto: key-listing diff where the listing is the truth, artifact
	// restore otherwise.
	RepairAuto
)

var repairModeNames = [...]string{"none", "relist", "restore", "auto"}

func (m RepairMode) String() string {
	if int(m) < len(repairModeNames) {
		return repairModeNames[m]
	}
	return "RepairMode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText encodes m by name.
func (m RepairMode) MarshalText() ([]byte, error) {
	if int(m) >= len(repairModeNames) {
		return nil, fmt.Errorf("protocol: invalid repair mode %d", m)
	}
	return []byte(m.String()), nil
}

// UnmarshalText decodes a repair mode name.
func (m *RepairMode) UnmarshalText(b []byte) error {
	for i, n := range repairModeNames {
		if string(b) == n {
			*m = RepairMode(i)
			return nil
		}
	}
	return fmt.Errorf("protocol: repair mode %q: want one of none, relist, restore, auto", b)
}

// RepairPlan is what PlanRepair decides.
type RepairPlan uint8

const (
	// PlanRelistOnly: no repair armed; re-list with a warning that keys
	// deleted during the gap may persist.
	PlanRelistOnly RepairPlan = iota
	// PlanKeyListingDiff: synthetic deletes for fold keys the bucket no
	// longer lists, then the re-list.
	PlanKeyListingDiff
	// PlanRefuse: a key-listing diff was asked for where the listing is not
	// the truth; it would delete keys that merely aged out. The fold stops,
	// untouched.
	PlanRefuse
	// PlanRestore: restore the fold from the newest artifact that
	// RestoreAllowed accepts.
	PlanRestore
)

var repairPlanNames = [...]string{"relist-only", "key-listing-diff", "refuse", "restore"}

func (p RepairPlan) String() string {
	if int(p) < len(repairPlanNames) {
		return repairPlanNames[p]
	}
	return "RepairPlan(" + strconv.Itoa(int(p)) + ")"
}

// PlanRepair turns the armed mode and the listing's truth into the repair.
// Relist where the listing is known not to be the truth is refused; with
// unknown retention, an explicit Relist is honoured (the operator chose it).
// Auto diffs only on TruthYes and restores otherwise.
//
// An out-of-range mode or truth is a broken invariant (no decoder produces
// one) and panics.
func PlanRepair(mode RepairMode, truth Truth) RepairPlan {
	mustValid(mode, truth)
	switch mode {
	case RepairRelist:
		if truth == TruthNo {
			return PlanRefuse
		}
		return PlanKeyListingDiff
	case RepairRestore:
		return PlanRestore
	case RepairAuto:
		if truth == TruthYes {
			return PlanKeyListingDiff
		}
		return PlanRestore
	}
	return PlanRelistOnly
}

// CursorlessStartNeedsRepair reports whether a start without a cursor must run
// the planned repair (as if the cursor expired at revision 0) before its
// state-sync: when the fold holds data anyway (a torn first commit, a
// populated store: a re-list never removes what it does not deliver), or when
// a restore is armed and the listing is not known to be the truth (the
// re-list would be incomplete: evicted keys exist only in artifacts).
// With RepairNone nothing can run, so the answer is false.
func CursorlessStartNeedsRepair(mode RepairMode, foldHasData bool, truth Truth) bool {
	mustValid(mode, truth)
	if mode == RepairNone {
		return false
	}
	if foldHasData {
		return true
	}
	return (mode == RepairRestore || mode == RepairAuto) && truth != TruthYes
}

func mustValid(mode RepairMode, truth Truth) {
	if int(mode) >= len(repairModeNames) {
		panic(fmt.Sprintf("protocol: invalid RepairMode %d", mode))
	}
	if truth > TruthNo {
		panic(fmt.Sprintf("protocol: invalid Truth %d", truth))
	}
}

// RestoreAhead reports whether an artifact is strictly ahead of the fold's
// applied cursor. A restore is only ever a move forward; the loop re-checks
// this against its own applied cursor right before folding the artifact in
// (a mid-watch expiry may have applied past the resume cursor).
func RestoreAhead(artifact, applied Revision) bool { return artifact > applied }

// RestoreAllowed is the restore guard: an expired fold may be replaced by an
// artifact only if the artifact is strictly ahead of the fold (a restore never
// moves the fold or the plugin's view backward) and a resume from the
// artifact's cursor is sound (CheckResume: inside retention, not beyond the
// stream head, so the resume from it is gap-free).
func RestoreAllowed(artifact, local Revision, w Window) bool {
	return RestoreAhead(artifact, local) && CheckResume(artifact, w) == ResumeOK
}

// KeyState is one key's entry on one side of a restore diff.
type KeyState struct {
	Present bool
	Rev     Revision // revision of the entry's last write; meaningful if Present
}

// KeyRestore is the per-key decision of a restore.
type KeyRestore uint8

const (
	// KeepLocal: leave the local entry (or absence) as it is.
	KeepLocal KeyRestore = iota
	// TakeArtifact: replace the local entry with the artifact's.
	TakeArtifact
	// DeleteLocal: delete the local entry.
	DeleteLocal
)

var keyRestoreNames = [...]string{"keep", "take", "delete"}

func (k KeyRestore) String() string {
	if int(k) < len(keyRestoreNames) {
		return keyRestoreNames[k]
	}
	return "KeyRestore(" + strconv.Itoa(int(k)) + ")"
}

// RestoreKey decides one key of a restore. identical reports that local and
// artifact entries are byte-identical; listedLive that the bucket lists the
// key live now.
//
// Take the artifact's entry unless the local one is identical or newer (a key
// never moves backward); delete a key the artifact lacks unless the bucket
// lists it live (never a phantom delete). Both skipped cases are keys whose
// latest write is after the artifact's cursor, which the resume from that
// cursor delivers: an artifact is complete together with the log after it.
func RestoreKey(local, artifact KeyState, identical, listedLive bool) KeyRestore {
	if artifact.Present {
		if local.Present && (identical || local.Rev > artifact.Rev) {
			return KeepLocal
		}
		return TakeArtifact
	}
	if local.Present && !listedLive {
		return DeleteLocal
	}
	return KeepLocal
}
