//go:build pictures

package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/modref/modref/mod/train"
	"github.com/modref/modref/mod/train/plot"
)

// picturesBuilt says whether this build of modref draws a training run's
// pictures: only a build with -tags pictures does, so that the oracle's
// commands do not build the plotting stack (nopictures.go).
const picturesBuilt = true

// drawRun writes the run's pictures, PNG and SVG: the held-out loss
// against training FLOPs and wall-clock time, and, for a model with routed
// layers, the routing of 64 held-out bytes (from the first line start) and
// the histogram of the router weights of 16 windows of SeqLen held-out
// bytes.
func drawRun(out string, tr *train.Trainer) error {
	runs := []plot.Run{{Name: filepath.Base(out), Metrics: tr.Metrics()}}
	lf, err := plot.Loss("held-out loss against training compute", runs, plot.FLOPs)
	if err != nil {
		return err
	}
	lt, err := plot.Loss("held-out loss against training time", runs, plot.Seconds)
	if err != nil {
		return err
	}
	for _, ext := range []string{"png", "svg"} {
		if err := plot.Save(filepath.Join(out, "loss-flops."+ext), lf, 16*vg.Centimeter, 10*vg.Centimeter); err != nil {
			return err
		}
		if err := plot.Save(filepath.Join(out, "loss-time."+ext), lt, 16*vg.Centimeter, 10*vg.Centimeter); err != nil {
			return err
		}
	}
	routed := false
	for _, ml := range tr.Config().Model.Layers {
		routed = routed || ml.Routed
	}
	if !routed {
		return nil
	}
	held := tr.HeldOut()
	start := 0
	if i := strings.IndexByte(string(held), '\n'); i >= 0 && i+1 < len(held) {
		start = i + 1
	}
	n := min(64, tr.Config().SeqLen, len(held)-start)
	r, err := train.Inspect(tr.Model(), held[start:start+n])
	if err != nil {
		return err
	}
	rp, err := plot.Routing(fmt.Sprintf("bytes each layer processed (top-k, capacity as trained), step %d", tr.StepsDone()), r)
	if err != nil {
		return err
	}
	wr, err := train.InspectWindows(tr.Model(), tr.HeldOut(), tr.Config().SeqLen, 16)
	if err != nil {
		return err
	}
	hp, err := plot.RouterWeights(fmt.Sprintf("router weights of %d held-out bytes, step %d", len(wr.Text), tr.StepsDone()), wr, 40)
	if err != nil {
		return err
	}
	for _, ext := range []string{"png", "svg"} {
		if err := plot.Save(filepath.Join(out, "routing."+ext), rp, vg.Length(n)*0.45*vg.Centimeter+6*vg.Centimeter, 7*vg.Centimeter); err != nil {
			return err
		}
		if err := plot.Save(filepath.Join(out, "router-weights."+ext), hp, 16*vg.Centimeter, 10*vg.Centimeter); err != nil {
			return err
		}
	}
	return nil
}
