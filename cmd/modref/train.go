package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/modref/modref/internal/readfile"
	"github.com/modref/modref/mod/train"
	"github.com/modref/modref/spec"
)

// errInterrupted marks a command stopped by Ctrl-C (or SIGTERM) after
// keeping what it made: train's checkpoint, sample's text so far.
var errInterrupted = errors.New("interrupted")

// resumeFlags are the flags that may accompany --resume; every other one
// would change the run, whose configuration comes from the checkpoint.
var resumeFlags = []string{"out", "resume", "data", "save-every", "quiet"}

// runTrain trains a byte-level MoD language model and writes a run
// directory: the checkpoint (config, parameters, optimiser state, metrics)
// and the pictures.
func runTrain(args []string, stdout, stderr io.Writer) error {
	def := train.DefaultConfig()
	fs := newFlagSet("train", stdout, stderr)
	fs.describe("train [--out DIR] [--data FILE] [--resume] [flags]", "Trains a byte-level MoD language model on a text and writes a run directory:\nthe checkpoint, its metrics, and the pictures in a build with -tags pictures\n(docs/training.md).")
	out := fs.String("out", "modref-run", "run directory, new or empty unless --resume: checkpoint/ (and the pictures in a -tags pictures build)")
	data := fs.String("data", "", "training text (default: "+train.DefaultTextName+")")
	resume := fs.Bool("resume", false, "continue the checkpoint in --out (bit-identically)")
	saveEvery := fs.Int("save-every", 100, "steps between checkpoints (0: only at the end and on Ctrl-C)")
	quiet := fs.Bool("quiet", false, "no progress bar (there is none when stderr is not a terminal)")
	configFile := fs.String("config", "", "JSON train.Config to start from (every routing option of mod); training flags override it")
	d := fs.Int("d", 64, "model width d (d_ff = 4d)")
	heads := fs.Int("heads", 4, "attention heads")
	layers := fs.Int("layers", 4, "layers")
	routing := fs.String("routing", "odd", "routed layers: dense, odd (1, 3, ...), every_other (0, 2, ...) or all")
	capacity := fs.Float64("capacity", 0.125, "capacity ratio c of the routed layers")
	aux := fs.String("aux", "predictor", "auxiliary objective: none, router_bce or predictor")
	auxWeight := fs.Float64("aux-weight", 0.1, "weight of the auxiliary loss")
	steps := fs.Int("steps", def.Steps, "optimiser steps")
	batch := fs.Int("batch", def.Batch, "sequences per step")
	seq := fs.Int("seq", def.SeqLen, "bytes per sequence")
	lr := fs.Float64("lr", def.LR, "peak learning rate")
	minLR := fs.Float64("min-lr", def.MinLR, "learning rate at the last step")
	warmup := fs.Int("warmup", def.Warmup, "warm-up steps (default: an eighth of --steps)")
	clip := fs.Float64("clip", def.Clip, "largest global gradient norm (0: no clipping)")
	wd := fs.Float64("weight-decay", def.WeightDecay, "AdamW weight decay")
	evalEvery := fs.Int("eval-every", def.EvalEvery, "steps between evaluations")
	evalBatches := fs.Int("eval-batches", def.EvalBatches, "batches per evaluation")
	seed := fs.Uint64("seed", def.Seed, "seed of the parameters, batches and noise")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, name := range []string{"out", "data", "config"} {
		if err := refuseEmpty(fs, name); err != nil {
			return err
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *saveEvery < 0 {
		return fmt.Errorf("--save-every = %d, want >= 0", *saveEvery)
	}
	ckDir := filepath.Join(*out, checkpointName)

	var tr *train.Trainer
	if *resume {
		for name := range set {
			if !slices.Contains(resumeFlags, name) {
				return fmt.Errorf("--%s cannot be combined with --resume: the configuration comes from the checkpoint", name)
			}
		}
		// The directory is locked before the checkpoint's files are read,
		// so that another run's save cannot replace it between two of
		// them; only a directory that holds a checkpoint is locked.
		if err := train.CheckCheckpoint(ckDir); err != nil {
			return fmt.Errorf("train: %w", err)
		}
		lock, err := lockRun(*out, true)
		if err != nil {
			return err
		}
		defer lock.Release()
		_, ck, err := train.LoadModel(ckDir)
		if err != nil {
			return err
		}
		text, err := readTextFor(*data, ck.Text.Name)
		if err != nil {
			return err
		}
		if tr, err = train.Load(ckDir, text); err != nil {
			return err
		}
		if tr.Done() {
			return fmt.Errorf("the checkpoint in %s has taken all %d steps; nothing to resume", ckDir, ck.Config.Steps)
		}
		if err := lock.Describe("modref train --out " + *out); err != nil {
			return err
		}
	} else {
		if err := checkNewRun(*out); err != nil {
			return inUse(*out, err)
		}
		cfg := def
		if *configFile != "" {
			raw, err := readfile.Read(*configFile, train.MaxConfigBytes)
			if err != nil {
				return fmt.Errorf("--config: %w", err)
			}
			if err := train.DecodeConfig(raw, &cfg); err != nil {
				return fmt.Errorf("--config %s: %w", *configFile, err)
			}
		}
		modelFlags := set["d"] || set["heads"] || set["layers"] || set["routing"] || set["capacity"] || set["aux"] || set["aux-weight"]
		if *configFile != "" && modelFlags {
			return fmt.Errorf("--d, --heads, --layers, --routing, --capacity, --aux and --aux-weight cannot be combined with --config; set the model in the config's Model")
		}
		if *configFile == "" {
			m, err := modelFromFlags(*d, *heads, *layers, *routing, *capacity, *aux, *auxWeight)
			if err != nil {
				return err
			}
			cfg.Model = m
		}
		for name, apply := range map[string]func(){
			"steps": func() { cfg.Steps = *steps }, "batch": func() { cfg.Batch = *batch }, "seq": func() { cfg.SeqLen = *seq },
			"lr": func() { cfg.LR = *lr }, "min-lr": func() { cfg.MinLR = *minLR }, "warmup": func() { cfg.Warmup = *warmup },
			"clip": func() { cfg.Clip = *clip }, "weight-decay": func() { cfg.WeightDecay = *wd },
			"eval-every": func() { cfg.EvalEvery = *evalEvery }, "eval-batches": func() { cfg.EvalBatches = *evalBatches },
			"seed": func() { cfg.Seed = *seed },
		} {
			if set[name] || *configFile == "" {
				apply()
			}
		}
		if *configFile == "" && set["steps"] && !set["warmup"] {
			cfg.Warmup = cfg.Steps / 8
		}
		// The sizes and the memory they imply, before the text is read.
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		text, err := readTextFor(*data, "")
		if err != nil {
			return err
		}
		if tr, err = train.New(cfg, text); err != nil {
			return err
		}
		// Locked, the directory is checked again: another run may have
		// taken it since.
		lock, err := lockRun(*out, false)
		if err != nil {
			return err
		}
		defer lock.Release()
		if err := checkNewRun(*out); err != nil {
			return err
		}
		if err := lock.Describe("modref train --out " + *out); err != nil {
			return err
		}
	}

	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A periodic save that fails stops the run at once: the checkpoint of
	// the last good save is left whole (atomicfile.ReplaceDir removes the
	// partial one), and training on would only lose more work.
	ctx, cancel := context.WithCancel(sig)
	defer cancel()
	saved := tr.StepsDone()
	cfg := tr.Config()
	bar := newBar(stderr, *quiet, cfg.Steps, tr.StepsDone(), "steps")
	if bar != nil && cfg.EvalBatches > 1 {
		tr.SetEvalProgress(func(done, total int) {
			bar.Describe(fmt.Sprintf("evaluating: held-out batch %d/%d", done, total))
		})
	}
	lastEval := len(tr.Metrics().Evals)
	var saveErr error
	err := tr.Run(ctx, func(s train.Step) {
		desc := fmt.Sprintf("loss %.3f", s.Loss)
		if evs := tr.Metrics().Evals; len(evs) > lastEval {
			lastEval = len(evs)
			e := evs[len(evs)-1]
			desc += fmt.Sprintf(", held-out %.3f", e.Loss)
			if bar == nil {
				fmt.Fprintf(stdout, "step %d/%d: train loss %.4f, held-out loss %.4f, %.3g FLOPs, %.1f s\n", s.Step, cfg.Steps, s.Loss, e.Loss, e.FLOPs, e.WallSeconds)
			}
		}
		if bar != nil {
			bar.Describe(fmt.Sprintf("%s, %.0f tokens/s", desc, float64(s.Tokens)/s.WallSeconds))
			bar.Set(s.Step)
		}
		if *saveEvery > 0 && s.Step%*saveEvery == 0 && s.Step < cfg.Steps && saveErr == nil {
			if saveErr = tr.Save(ckDir); saveErr != nil {
				cancel()
			} else {
				saved = s.Step
			}
		}
	})
	if bar != nil {
		bar.Exit()
		fmt.Fprintln(stderr)
	}
	if saveErr != nil {
		return failedSave(saveErr, tr.StepsDone(), saved, ckDir, *out)
	}
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		return err
	}
	if err := tr.Save(ckDir); err != nil {
		return failedSave(err, tr.StepsDone(), saved, ckDir, *out)
	}
	if interrupted {
		fmt.Fprintf(stderr, "modref train: interrupted after step %d of %d; checkpoint saved in %s; continue with: modref train --out %s --resume\n", tr.StepsDone(), cfg.Steps, ckDir, *out)
		return errInterrupted
	}
	if err := drawRun(*out, tr); err != nil {
		return err
	}
	m := tr.Metrics()
	e := m.Evals[len(m.Evals)-1]
	fmt.Fprintf(stdout, "trained %d steps on %s (%d bytes): held-out loss %.4f nats/byte, %.3g training FLOPs, %.1f s; run directory %s\n",
		cfg.Steps, tr.Text().Name, tr.Text().Bytes, e.Loss, e.FLOPs, e.WallSeconds, *out)
	for l, ly := range e.Layers {
		if ly.Routed {
			fmt.Fprintf(stdout, "  layer %d: routed %.1f %% of held-out bytes; predictor accuracy %.1f %%, recall of top-k %.1f %%\n", l, 100*ly.Fraction, 100*ly.PredictorAccuracy, 100*ly.PredictorRecall)
		}
	}
	if !picturesBuilt {
		fmt.Fprintln(stdout, "  pictures: not drawn; this modref was built without the plotting code (build it with -tags pictures to draw them)")
	}
	return nil
}

// failedSave is the error of a checkpoint save that failed after step: it
// says that training stopped and where the last good checkpoint is.
func failedSave(err error, step, saved int, ckDir, out string) error {
	if saved == 0 {
		return fmt.Errorf("%w\ntraining stopped at step %d; no checkpoint was saved before", err, step)
	}
	return fmt.Errorf("%w\ntraining stopped at step %d; the checkpoint of step %d in %s is intact: continue with modref train --out %s --resume", err, step, saved, ckDir, out)
}

// modelFromFlags builds the model configuration the flags describe.
func modelFromFlags(d, heads, layers int, routing string, capacity float64, aux string, auxWeight float64) (spec.ModelConfig, error) {
	r := train.MoDRouting(capacity)
	r.Aux, r.AuxWeight = spec.AuxObjective(aux), auxWeight
	if r.Aux == spec.AuxNone && auxWeight > 0 {
		r.AuxWeight = 0
	}
	var pattern spec.Pattern
	switch routing {
	case "dense":
		pattern = spec.Pattern{Kind: spec.PatternList}
	case "odd":
		pattern = train.OddLayers
	case "every_other":
		pattern = spec.Pattern{Kind: spec.PatternEveryOther}
	case "all":
		pattern = spec.Pattern{Kind: spec.PatternAll}
	default:
		return spec.ModelConfig{}, fmt.Errorf("--routing = %q, want dense, odd, every_other or all (or --config for other patterns)", routing)
	}
	m, err := train.ModelConfig(d, heads, layers, r, pattern)
	if err != nil {
		return m, fmt.Errorf("model: %w", err)
	}
	return m, nil
}

// readTextFor reads --data, or else the text a checkpoint names (when
// resuming), or else the default text.
func readTextFor(data, saved string) (train.Text, error) {
	switch {
	case data != "":
		return train.ReadText(data)
	case saved != "" && saved != train.DefaultTextName:
		return train.ReadText(saved)
	}
	return train.DefaultText()
}

// newBar returns a progress bar of total units on stderr, done of them
// done, when stderr is a terminal and quiet is off, nil otherwise.
func newBar(stderr io.Writer, quiet bool, total, done int, unit string) *progressbar.ProgressBar {
	f, ok := stderr.(*os.File)
	if quiet || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionFullWidth(),
		progressbar.OptionShowDescriptionAtLineEnd(),
	)
	bar.Set(done)
	return bar
}
