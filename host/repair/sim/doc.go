// Package sim holds the deterministic simulation of the cursor-expiry
// repair (sim_test.go; it has no code outside its tests): the real loop
// (fold.Follow), a real store and the host's own repair (repair.Runner:
// planning, the eviction memo, the key-listing repair and its Verify, the
// artifact checks and the restore and its Verify), driven by a simulated
// NATS KV bucket and a fault-injecting store through seeded schedules, with
// real artifacts of a second simulated node in a real artifact store.
//
//	go test ./host/repair/sim -run TestSimulation -args -repair.sim.schedules=N
//
// It is its own package so that its test binary does not link a NATS
// server: the source-mutation check (host/repair/mutation_test.go)
// compiles it once per mutation.
package sim
