package sim

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/leakcheck"
	"github.com/foldhost/foldhost/protocol"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// entry is one raw fold entry.
type entry struct {
	rev   protocol.Revision
	value string
}

// mirror is the simulation's views: "v/<key>" = value for every live key.
type mirror struct{}

func (mirror) Apply(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
	var out fold.Output
	for _, u := range batch {
		k := []byte("v/" + u.Key)
		if u.Op == fold.OpPut {
			out.Views = append(out.Views, fold.ViewMutation{Key: k, Op: fold.ViewPut, Value: u.Value})
		} else {
			out.Views = append(out.Views, fold.ViewMutation{Key: k, Op: fold.ViewDelete})
		}
	}
	return out, nil
}
