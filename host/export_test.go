package host

import (
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm"
)

// SetMergedRangeBudget sets the entries a merged range page asks its
// units for together, for a test; the returned func restores it.
func SetMergedRangeBudget(n int) func() {
	old := mergedRangeBudget
	mergedRangeBudget = n
	return func() { mergedRangeBudget = old }
}

// NewUnitsReader reads the units' snapshots sns (by partition) of a fold
// of bucket as a partitioned fold's query does.
func NewUnitsReader(bucket string, sns []*fold.Snapshot) wasm.QueryReader {
	rd := &unitsReader{bucket: bucket}
	for _, sn := range sns {
		rd.units = append(rd.units, localUnit{sn})
	}
	return rd
}

// SetFirstRemotePage sets the entries a query's first page of a unit read
// on another node asks for, for a test; the returned func restores it.
func SetFirstRemotePage(n int) func() {
	old := firstRemotePage
	firstRemotePage = n
	return func() { firstRemotePage = old }
}

// SetDemux turns the Demux on or off for hosts started after it, for a
// test; the returned func restores it.
func SetDemux(on bool) func() {
	old := noDemux
	noDemux = !on
	return func() { noDemux = old }
}
