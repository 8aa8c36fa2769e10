// Package deploy holds what an operator deploys beside foldhost: the
// Grafana dashboard (grafana/foldhost.json) and the Prometheus alerting
// rules (prometheus/foldhost-rules.yml) with their promtool unit tests
// (prometheus/foldhost-rules.test.yml). It has no code; its tests check
// that every metric they query is one the host exports, that no exported
// foldhost metric carries an unbounded label, that the rules pass
// promtool's checks and unit tests, which cover every alert, and that
// under a real Prometheus scraping the built binary every rule is healthy,
// an idle host raises no alert and a failed fold raises one. They need
// Debian's prometheus package (promtool with it), which scripts/test
// installs.
package deploy
