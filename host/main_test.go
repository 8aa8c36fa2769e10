package host

import (
	"os"
	"testing"

	"github.com/foldhost/foldhost/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if os.Getenv(FleetChildEnv) != "" {
		fleetChild() // a node of the fleet tests' (fleetkill_test.go)
	}
	os.Exit(leakcheck.Run(m))
}
