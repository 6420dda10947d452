package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/train"
	"github.com/modref/modref/spec"
)

// runSample generates text from a checkpoint with causal routing through
// mod's per-layer KV-cache decoder, and reports the fraction of bytes each
// layer processed and the decoding speed beside the model's dense twin.
func runSample(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sample", stdout, stderr)
	fs.describe("sample --checkpoint DIR [--prompt TEXT] [flags]", "Generates text from a checkpoint of modref train with causal routing, and\nreports the fraction of bytes each layer processed and the decoding speed\nbeside the model's dense twin (docs/training.md).")
	dir := fs.String("checkpoint", "", "run directory of modref train, or its checkpoint/ directory (required)")
	prompt := fs.String("prompt", "The ", "text to continue (not empty)")
	tokens := fs.Int("tokens", 200, "bytes to generate")
	temperature := fs.Float64("temperature", 0.8, "sampling temperature (0: the most likely byte)")
	topK := fs.Int("top-k", 0, "sample among the k most likely bytes (0: all)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	causal := fs.String("causal", "", "causal routing: predictor or router (default: predictor when the model has one)")
	dense := fs.Bool("compare-dense", true, "time decoding against the dense twin (same size, every layer dense), median of 5 runs each")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "modref sample: --checkpoint DIR is required")
		return errUsage
	}
	if n := len(*prompt); *tokens > train.MaxSampleBytes-n || n > train.MaxSampleBytes {
		return fmt.Errorf("--tokens = %d after a --prompt of %d bytes exceeds the bound of %d bytes together (train.MaxSampleBytes)", *tokens, n, train.MaxSampleBytes)
	}
	ck := *dir
	if _, err := os.Stat(filepath.Join(ck, "checkpoint", "config.json")); err == nil {
		ck = filepath.Join(ck, "checkpoint")
	}
	m, _, err := train.LoadModel(ck)
	if err != nil {
		return err
	}
	mode := train.DefaultCausal(m)
	switch *causal {
	case "":
	case "predictor", "router":
		mode = spec.CausalRouting(*causal)
	default:
		return fmt.Errorf("--causal = %q, want predictor or router", *causal)
	}
	cm, err := train.CausalModel(m, mode)
	if err != nil {
		return err
	}
	sc := train.SampleConfig{Prompt: []byte(*prompt), Tokens: *tokens, Temperature: *temperature, TopK: *topK, Seed: *seed}
	// Ctrl-C (or SIGTERM) stops the decoding; the text made so far is
	// printed. Once it is printed, they end modref as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fed := len(sc.Prompt) + max(sc.Tokens-1, 0)
	bar := newBar(stderr, false, fed, 0, "bytes")
	s, err := train.GenerateContext(ctx, cm, sc, func(done, _ int) {
		if bar != nil {
			bar.Set(done)
		}
	})
	if bar != nil {
		bar.Exit()
		fmt.Fprintln(stderr)
	}
	stop()
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stdout, "%s\n", s.Text)
		fmt.Fprintf(stderr, "modref sample: interrupted after %d of %d decoding steps; the text above is the prompt and the %d bytes generated so far\n", len(s.Routed), fed, len(s.Text)-len(sc.Prompt))
		return errInterrupted
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", s.Text)
	fmt.Fprintf(stderr, "\nbytes through each layer's block (%d decoding steps, causal routing by the %s):\n", len(s.Routed), mode)
	for l, f := range s.Fraction {
		kind := "dense"
		if m.Layers[l] != nil {
			kind = "routed"
		}
		fmt.Fprintf(stderr, "  layer %d (%s): %5.1f %%\n", l, kind, 100*f)
	}
	if !*dense {
		fmt.Fprintf(stderr, "decoding: %.0f tokens/s\n", s.TokensPerSecond)
		return nil
	}
	twin, err := train.DenseTwin(m, 1)
	if err != nil {
		return err
	}
	rates, err := train.DecodeRates([]*mod.Model{cm, twin}, sc, 5)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "decoding (median of 5, alternating): %.0f tokens/s; dense twin (same size, every layer dense): %.0f tokens/s; time per token %.2f× the dense twin's\n",
		rates[0].Median, rates[1].Median, rates[1].Median/rates[0].Median)
	return nil
}
