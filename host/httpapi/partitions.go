package httpapi

import "net/http"

// PartitionStatus is where one partition of a fold runs, as GET
// /v1/folds/{name}/partitions answers it: its owner (the node that folds
// it, publishes its effects and exports it) and the owner's epoch, the
// standbys that keep warm copies, and the owner's state and cursor as
// known here (its record in the fleet, or this node's own copy).
type PartitionStatus struct {
	Partition int      `json:"partition"`
	Owner     string   `json:"owner"`
	Epoch     uint64   `json:"epoch"`
	Standbys  []string `json:"standbys"`
	State     string   `json:"state"`
	Cursor    uint64   `json:"cursor"`
	// To is the node a hand-over names while the partition has no owner.
	To string `json:"to,omitempty"`
	// Advertise is the owner's HTTP address ("" when not known).
	Advertise string `json:"advertise,omitempty"`
}

// Partitions is GET /v1/folds/{name}/partitions's answer.
type Partitions struct {
	Fold       string            `json:"fold"`
	Partitions []PartitionStatus `json:"partitions"`
}

// partitions answers where the fold's partitions run (Options.Placement).
func (s *server) partitions(w http.ResponseWriter, r *http.Request) {
	f := s.fold(w, r)
	if f == nil {
		return
	}
	ps := s.placement(f)
	if ps == nil {
		ps = []PartitionStatus{}
	}
	writeJSON(w, http.StatusOK, Partitions{Fold: f.Name(), Partitions: ps})
}
