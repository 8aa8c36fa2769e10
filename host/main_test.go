package host

import (
	"os"
	"testing"

	"github.com/foldhost/foldhost/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if os.Getenv(KillRebuildEnv) != "" {
		killRebuildChild() // a child of TestKilledRebuild
	}
	os.Exit(leakcheck.Run(m))
}
