package host

import (
	"os"
	"testing"

	"github.com/foldhost/foldhost/internal/leakcheck"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m))
}
