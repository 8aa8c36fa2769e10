package repair_test

import (
	"os"
	"testing"

	"github.com/foldhost/foldhost/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if os.Getenv(killEnvMode) != "" {
		killChild() // a child of TestKilledRepairsConverge
	}
	if os.Getenv(scaleEnvNATS) != "" {
		scaleNATSChild() // the NATS server of TestRepairScaling
	}
	os.Exit(leakcheck.Run(m))
}
