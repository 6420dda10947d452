// Command experiment reproduces in miniature the headline claims of
// Raposo et al. 2024 (arXiv 2404.02258) on a CPU, for docs/results.md:
//
//  1. isoFLOP: at equal training FLOPs, MoD at capacity 12.5 % on every
//     other layer reaches a held-out loss at or below the dense model's;
//  2. a MoD training step takes less wall-clock time than a dense one;
//  3. the auxiliary predictor predicts the top-k routing decisions with
//     high accuracy (the paper reports about 97 %);
//  4. sampling with causal routing is faster per token than dense sampling.
//
// For each seed it trains the dense model for -steps steps and the MoD model
// for as many steps as the same training FLOPs buy (runs alternate, so that
// a change in the machine's load touches both), then evaluates the MoD model
// with causal routing by its predictor, and times decoding of both models.
// It writes results.json and the pictures (PNG) to -out and prints a
// Markdown summary.
//
// Usage:
//
//	go run ./mod/train/experiment [-out DIR] [-seeds N] [-steps N] [-keep DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/train"
	"github.com/modref/modref/mod/train/plot"
	"github.com/modref/modref/spec"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "experiment:", err)
		os.Exit(2)
	}
}

// Result is what one seed measured.
type Result struct {
	Seed int
	// DenseSteps, MoDSteps and ShallowSteps are the steps each model took
	// for the same training FLOPs (within one step).
	DenseSteps, MoDSteps, ShallowSteps int
	// DenseFLOPs, MoDFLOPs and ShallowFLOPs are the training FLOPs spent.
	DenseFLOPs, MoDFLOPs, ShallowFLOPs float64
	// ShallowLoss is the final held-out loss of the control: a dense model
	// with 2 layers, which gets more steps than the 4-layer one for the same
	// FLOPs, as MoD does.
	ShallowLoss float64
	// DenseLoss and MoDLoss are the final held-out losses (top-k routing);
	// MoDCausalLoss is the MoD model's with causal routing by its predictor.
	DenseLoss, MoDLoss, MoDCausalLoss float64
	// DenseStepMs and MoDStepMs are the mean wall time of a training step.
	DenseStepMs, MoDStepMs float64
	// PredictorAccuracy and PredictorRecall are per routed layer, on the
	// held-out text at the end of training.
	PredictorAccuracy, PredictorRecall map[int]float64
	// SampleFraction is, per layer, the fraction of bytes the MoD model's
	// blocks processed while sampling with causal routing.
	SampleFraction []float64
	// DenseTokensPerSec and MoDTokensPerSec are decoding speeds, the median
	// of 11 alternating runs of 128 greedy steps; DenseBestTokensPerSec and
	// MoDBestTokensPerSec the fastest run of each, which a busy machine
	// disturbs least.
	DenseTokensPerSec, MoDTokensPerSec         float64
	DenseBestTokensPerSec, MoDBestTokensPerSec float64
	// Sample is the MoD model's greedy continuation of the prompt.
	Sample string
	// DenseEvals, MoDEvals and ShallowEvals are the held-out losses along
	// each run: what a shortened run is checked against (main_test.go).
	DenseEvals, MoDEvals, ShallowEvals []EvalPoint
}

// EvalPoint is one evaluation of a run: the held-out loss after Step
// steps and FLOPs training FLOPs.
type EvalPoint struct {
	Step  int
	FLOPs float64
	Loss  float64
}

// evalPoints returns the evaluations of a run's metrics.
func evalPoints(m *train.Metrics) []EvalPoint {
	out := make([]EvalPoint, len(m.Evals))
	for i, e := range m.Evals {
		out[i] = EvalPoint{e.Step, e.FLOPs, e.Loss}
	}
	return out
}

// Results is the content of results.json.
type Results struct {
	Date         string
	GoVersion    string
	GOMAXPROCS   int
	Text         train.TextInfo
	Config       train.Config // the MoD run's, Steps and Seed aside
	MoDRatio     float64      // forward FLOPs of a MoD step / a dense step
	ShallowRatio float64      // forward FLOPs of a 2-layer dense step / a dense step
	Seeds        []Result
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("experiment", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "docs/results", "directory for results.json and the pictures")
	seeds := fs.Int("seeds", 3, "number of seeds (1, 2, ...)")
	steps := fs.Int("steps", 600, "dense training steps; MoD takes as many as the same FLOPs buy")
	keep := fs.String("keep", "", "directory to save every run's checkpoint in (for modref sample); none when empty")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *seeds < 1 || *steps < 10 {
		return fmt.Errorf("-seeds = %d and -steps = %d, want >= 1 and >= 10", *seeds, *steps)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	text, err := train.DefaultText()
	if err != nil {
		return err
	}
	dense, mcfg, shallow, ratio, shallowRatio, err := configs(*steps)
	if err != nil {
		return err
	}
	res := Results{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Text: text.Info(), Config: mcfg, MoDRatio: ratio, ShallowRatio: shallowRatio}
	fmt.Fprintf(stderr, "forward FLOPs per step against dense: MoD %.4f, 2-layer dense %.4f; steps per seed: dense %d, MoD %d, 2-layer dense %d\n",
		ratio, shallowRatio, dense.Steps, mcfg.Steps, shallow.Steps)

	var runs []plot.Run
	var firstMoD *train.Trainer
	for s := 1; s <= *seeds; s++ {
		dense.Seed, mcfg.Seed, shallow.Seed = uint64(s), uint64(s), uint64(s)
		r := Result{Seed: s, PredictorAccuracy: map[int]float64{}, PredictorRecall: map[int]float64{}}
		var trs [3]*train.Trainer
		for i, cfg := range []train.Config{dense, mcfg, shallow} {
			start := time.Now()
			tr, err := train.New(cfg, text)
			if err != nil {
				return err
			}
			if err := tr.Run(context.Background(), nil); err != nil {
				return err
			}
			trs[i] = tr
			fmt.Fprintf(stderr, "seed %d %s: %d steps in %.0f s\n", s, []string{"dense", "MoD", "2-layer dense"}[i], cfg.Steps, time.Since(start).Seconds())
		}
		dm, mm := trs[0].Metrics(), trs[1].Metrics()
		de, me := dm.Evals[len(dm.Evals)-1], mm.Evals[len(mm.Evals)-1]
		r.DenseSteps, r.MoDSteps = dense.Steps, mcfg.Steps
		r.DenseFLOPs, r.MoDFLOPs = de.FLOPs, me.FLOPs
		r.DenseLoss, r.MoDLoss = de.Loss, me.Loss
		sm := trs[2].Metrics()
		se := sm.Evals[len(sm.Evals)-1]
		r.ShallowSteps, r.ShallowFLOPs, r.ShallowLoss = shallow.Steps, se.FLOPs, se.Loss
		r.DenseStepMs = 1e3 * de.WallSeconds / float64(dense.Steps)
		r.MoDStepMs = 1e3 * me.WallSeconds / float64(mcfg.Steps)
		for l, ly := range me.Layers {
			if ly.Routed {
				r.PredictorAccuracy[l], r.PredictorRecall[l] = ly.PredictorAccuracy, ly.PredictorRecall
			}
		}
		causal, err := train.CausalModel(trs[1].Model(), spec.CausalPredictor)
		if err != nil {
			return err
		}
		ce, err := trs[1].EvaluateModel(causal)
		if err != nil {
			return err
		}
		r.MoDCausalLoss = ce.Loss
		held := trs[1].HeldOut()
		sc := train.SampleConfig{Prompt: held[:16], Tokens: 112}
		smp, err := train.Generate(causal, sc)
		if err != nil {
			return err
		}
		r.Sample, r.SampleFraction = string(smp.Text), smp.Fraction
		rates, err := train.DecodeRates([]*mod.Model{trs[0].Model(), causal}, sc, 11)
		if err != nil {
			return err
		}
		r.DenseTokensPerSec, r.MoDTokensPerSec = rates[0].Median, rates[1].Median
		r.DenseBestTokensPerSec, r.MoDBestTokensPerSec = rates[0].Best, rates[1].Best
		if *keep != "" {
			for i, name := range []string{"dense", "mod", "dense2"} {
				if err := trs[i].Save(filepath.Join(*keep, fmt.Sprintf("%s-seed%d", name, s))); err != nil {
					return err
				}
			}
		}
		r.DenseEvals, r.MoDEvals, r.ShallowEvals = evalPoints(dm), evalPoints(mm), evalPoints(sm)
		res.Seeds = append(res.Seeds, r)
		runs = append(runs, plot.Run{Name: fmt.Sprintf("dense seed %d", s), Group: "dense", Metrics: dm},
			plot.Run{Name: fmt.Sprintf("MoD seed %d", s), Group: "MoD 12.5 %, layers 1 and 3", Metrics: mm},
			plot.Run{Name: fmt.Sprintf("2-layer dense seed %d", s), Group: "dense, 2 layers (control)", Metrics: sm})
		if firstMoD == nil {
			firstMoD = trs[1]
		}
	}
	if err := writeJSON(filepath.Join(*out, "results.json"), res); err != nil {
		return err
	}
	if err := draw(*out, runs, firstMoD); err != nil {
		return err
	}
	summary(stdout, res)
	return nil
}

// configs returns the runs of one seed (Seed unset): the dense model for
// steps steps, and the MoD model and the 2-layer dense control for as many
// steps as the same training FLOPs buy (ratio and shallowRatio are their
// forward FLOPs per step over the dense model's), each evaluated every
// tenth of the dense run's FLOPs.
func configs(steps int) (dense, mcfg, shallow train.Config, ratio, shallowRatio float64, err error) {
	fail := func(err error) (train.Config, train.Config, train.Config, float64, float64, error) {
		return dense, mcfg, shallow, 0, 0, err
	}
	base := train.DefaultConfig()
	base.EvalEvery = steps / 10
	dense, mcfg = base, base
	if dense.Model, err = train.ModelConfig(64, 4, 4, train.MoDRouting(0.125), spec.Pattern{Kind: spec.PatternList}); err != nil {
		return fail(err)
	}
	if ratio, err = flopsRatio(mcfg, dense); err != nil {
		return fail(err)
	}
	shallow = dense
	if shallow.Model, err = train.ModelConfig(64, 4, 2, train.MoDRouting(0.125), spec.Pattern{Kind: spec.PatternList}); err != nil {
		return fail(err)
	}
	if shallowRatio, err = flopsRatio(shallow, dense); err != nil {
		return fail(err)
	}
	shallow.Steps = int(math.Round(float64(steps) / shallowRatio))
	shallow.Warmup = shallow.Steps / 10
	shallow.EvalEvery = int(math.Round(float64(dense.EvalEvery) / shallowRatio))
	dense.Steps = steps
	dense.Warmup = steps / 10
	mcfg.Steps = int(math.Round(float64(steps) / ratio))
	mcfg.Warmup = mcfg.Steps / 10
	mcfg.EvalEvery = int(math.Round(float64(dense.EvalEvery) / ratio))
	return dense, mcfg, shallow, ratio, shallowRatio, nil
}

// flopsRatio returns the forward FLOPs of a step of a over a step of b,
// from mod's accounting of one forward over a batch of their shape.
func flopsRatio(a, b train.Config) (float64, error) {
	f := func(c train.Config) (float64, error) {
		m, err := mod.NewModel(c.Model, c.Seed)
		if err != nil {
			return 0, err
		}
		in := mod.ModelInputs{Tokens: make([][]int, c.Batch), Targets: make([][]int, c.Batch)}
		for i := range in.Tokens {
			in.Tokens[i], in.Targets[i] = make([]int, c.SeqLen), make([]int, c.SeqLen)
		}
		var tp autograd.Tape
		res, err := m.Forward(&tp, in)
		if err != nil {
			return 0, err
		}
		return float64(res.FLOPs.Total), nil
	}
	fa, err := f(a)
	if err != nil {
		return 0, err
	}
	fb, err := f(b)
	if err != nil {
		return 0, err
	}
	return fa / fb, nil
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// draw writes the pictures: loss against FLOPs and against time for every
// run; for the first MoD model, the routing of 64 held-out bytes, top-k as
// trained and causal by the predictor, and the router weights of 16
// held-out windows.
func draw(out string, runs []plot.Run, tr *train.Trainer) error {
	// 64 bytes of prose: from the first held-out line that starts with a
	// capital letter.
	held := tr.HeldOut()
	start := 0
	for i := 1; i < len(held)-64; i++ {
		if held[i-1] == '\n' && held[i] >= 'A' && held[i] <= 'Z' {
			start = i
			break
		}
	}
	snippet := held[start : start+64]
	topk, err := train.Inspect(tr.Model(), snippet)
	if err != nil {
		return err
	}
	causal, err := train.CausalModel(tr.Model(), spec.CausalPredictor)
	if err != nil {
		return err
	}
	smp, err := train.Generate(causal, train.SampleConfig{Prompt: snippet})
	if err != nil {
		return err
	}
	byPredictor := &train.Routing{Text: snippet, Layers: make([]train.LayerRouting, len(topk.Layers))}
	for l := range byPredictor.Layers {
		byPredictor.Layers[l].Routed = topk.Layers[l].Routed
		for _, row := range smp.Routed {
			byPredictor.Layers[l].Processed = append(byPredictor.Layers[l].Processed, row[l])
		}
	}
	weights, err := train.InspectWindows(tr.Model(), held, tr.Config().SeqLen, 16)
	if err != nil {
		return err
	}
	wide := 64*0.45*vg.Centimeter + 6*vg.Centimeter
	for _, pic := range []struct {
		name string
		w, h vg.Length
		draw func() (*gplot.Plot, error)
	}{
		{"loss-flops", 16 * vg.Centimeter, 10 * vg.Centimeter, func() (*gplot.Plot, error) {
			return plot.Loss("held-out loss against training FLOPs", runs, plot.FLOPs)
		}},
		{"loss-time", 16 * vg.Centimeter, 10 * vg.Centimeter, func() (*gplot.Plot, error) {
			return plot.Loss("held-out loss against wall-clock training time", runs, plot.Seconds)
		}},
		{"routing-topk", wide, 7 * vg.Centimeter, func() (*gplot.Plot, error) {
			return plot.Routing("bytes each layer processed: top-k routing (training), seed 1", topk)
		}},
		{"routing-causal", wide, 7 * vg.Centimeter, func() (*gplot.Plot, error) {
			return plot.Routing("bytes each layer processed: causal routing by the predictor (sampling), seed 1", byPredictor)
		}},
		{"router-weights", 16 * vg.Centimeter, 10 * vg.Centimeter, func() (*gplot.Plot, error) {
			return plot.RouterWeights(fmt.Sprintf("router weights r of %d held-out bytes, seed 1", len(weights.Text)), weights, 50)
		}},
	} {
		p, err := pic.draw()
		if err != nil {
			return err
		}
		if err := plot.Save(filepath.Join(out, pic.name+".png"), p, pic.w, pic.h); err != nil {
			return err
		}
	}
	return nil
}

// summary prints the results as Markdown tables.
func summary(w io.Writer, res Results) {
	fmt.Fprintf(w, "%s, %s, GOMAXPROCS=%d, text %s (%d bytes), forward FLOPs per step against dense: MoD %.4f, 2-layer dense %.4f\n\n",
		res.Date, res.GoVersion, res.GOMAXPROCS, res.Text.Name, res.Text.Bytes, res.MoDRatio, res.ShallowRatio)
	fmt.Fprintln(w, "| seed | steps dense / MoD / 2-layer | training FLOPs dense / MoD / 2-layer | held-out loss dense | MoD (top-k) | MoD (causal, predictor) | 2-layer dense | step ms dense / MoD | predictor accuracy (recall) per routed layer | routed while sampling | decoding tokens/s dense / MoD, median (best) |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	var cols [11][]float64
	for _, r := range res.Seeds {
		var acc, frac []string
		for l := range r.SampleFraction {
			if a, ok := r.PredictorAccuracy[l]; ok {
				acc = append(acc, fmt.Sprintf("L%d %.1f %% (%.0f %%)", l, 100*a, 100*r.PredictorRecall[l]))
				frac = append(frac, fmt.Sprintf("L%d %.1f %%", l, 100*r.SampleFraction[l]))
			}
		}
		fmt.Fprintf(w, "| %d | %d / %d / %d | %.3g / %.3g / %.3g | %.4f | %.4f | %.4f | %.4f | %.1f / %.1f | %s | %s | %.0f (%.0f) / %.0f (%.0f) |\n",
			r.Seed, r.DenseSteps, r.MoDSteps, r.ShallowSteps, r.DenseFLOPs, r.MoDFLOPs, r.ShallowFLOPs, r.DenseLoss, r.MoDLoss, r.MoDCausalLoss, r.ShallowLoss,
			r.DenseStepMs, r.MoDStepMs, strings.Join(acc, ", "), strings.Join(frac, ", "), r.DenseTokensPerSec, r.DenseBestTokensPerSec, r.MoDTokensPerSec, r.MoDBestTokensPerSec)
		for i, v := range []float64{r.DenseLoss, r.MoDLoss, r.MoDCausalLoss, r.MoDLoss - r.DenseLoss,
			r.MoDStepMs / r.DenseStepMs, r.DenseTokensPerSec / r.MoDTokensPerSec, r.MoDTokensPerSec, r.DenseTokensPerSec,
			r.ShallowLoss, r.MoDLoss - r.ShallowLoss, r.DenseBestTokensPerSec / r.MoDBestTokensPerSec} {
			cols[i] = append(cols[i], v)
		}
	}
	names := []string{"dense loss", "MoD loss (top-k)", "MoD loss (causal)", "MoD − dense loss", "MoD/dense step time", "MoD/dense time per decoded token", "MoD tokens/s", "dense tokens/s", "2-layer dense loss", "MoD − 2-layer dense loss", "MoD/dense time per decoded token, best runs"}
	fmt.Fprintln(w, "\n| quantity | mean | sd | min | max |\n| --- | --- | --- | --- | --- |")
	for i, c := range cols {
		m, sd, lo, hi := stats(c)
		fmt.Fprintf(w, "| %s | %.4f | %.4f | %.4f | %.4f |\n", names[i], m, sd, lo, hi)
	}
	for _, r := range res.Seeds {
		fmt.Fprintf(w, "\nseed %d greedy sample (causal routing): %q\n", r.Seed, r.Sample)
	}
}

// stats returns the mean, sample standard deviation, minimum and maximum.
func stats(v []float64) (mean, sd, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		mean += x
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	mean /= float64(len(v))
	for _, x := range v {
		sd += float64((x - mean) * (x - mean))
	}
	if len(v) > 1 {
		sd = math.Sqrt(sd / float64(len(v)-1))
	}
	return mean, sd, lo, hi
}
