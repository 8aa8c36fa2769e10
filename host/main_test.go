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
	if os.Getenv(KillEffectsEnv) != "" {
		killEffectsChild() // a child of TestEffectsAudit
	}
	os.Exit(leakcheck.Run(m))
}
