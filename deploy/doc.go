// Package deploy holds what an operator deploys beside foldhost: the
// Grafana dashboard (grafana/foldhost.json) and the Prometheus alerting
// rules (prometheus/foldhost-rules.yml). It has no code; its test checks
// that every metric they query is one the host exports, and that no
// exported foldhost metric carries an unbounded label.
package deploy
