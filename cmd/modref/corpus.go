package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// runList implements `modref list`: one line per case.
func runList(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", golden.DefaultDir, "corpus directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	names, err := golden.List(*dir)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tkind\twhat it tests")
	for _, name := range names {
		m, err := golden.ReadManifest(golden.ManifestPath(*dir, name))
		if err != nil {
			return err
		}
		desc, _, _ := strings.Cut(m.Description, ": ")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, m.Kind, desc)
	}
	return tw.Flush()
}

// runExplain implements `modref explain CASE`: the configuration, the
// equations involved, what the case catches and the conventions it assumes.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", golden.DefaultDir, "corpus directory")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: modref explain [-dir DIR] CASE")
		return errUsage
	}
	c, err := golden.Load(*dir, fs.Arg(0))
	if err != nil {
		return err
	}
	m := c.Manifest
	fmt.Fprintf(stdout, "%s (%s case)\n\n%s\n\n", m.Name, m.Kind, m.Description)
	cfg := m.Config
	fmt.Fprintf(stdout, "Sizes: B = %d, S = %d", cfg.Batch, cfg.SeqLen)
	if cfg.ValidLengths != nil {
		fmt.Fprintf(stdout, ", valid lengths %v (right padding)", cfg.ValidLengths)
	}
	fmt.Fprintln(stdout)
	if cfg.Layer != nil {
		explainLayer(stdout, "Routed layer", *cfg.Layer)
	}
	for l, ml := range cfg.Layers {
		if ml.Routed {
			explainLayer(stdout, fmt.Sprintf("Layer %d (routed)", l), ml.Config)
		} else {
			fmt.Fprintf(stdout, "Layer %d: dense pre-norm block (SPEC.md section 5 with every token)\n", l)
		}
	}
	if cfg.Vocab > 0 {
		fmt.Fprintf(stdout, "Model: vocabulary %d, embedding, the layers above, final norm, LM head, mean cross-entropy over valid targets (SPEC.md section 10)\n", cfg.Vocab)
	}
	fmt.Fprintf(stdout, "\nLoss whose gradients the grad.* arrays hold: %s\n", m.Loss)
	fmt.Fprintf(stdout, "\nCatches (SPEC.md section 11):\n")
	for _, name := range m.Catches {
		fmt.Fprintf(stdout, "  %-24s %s\n", name, golden.DeviationDescription(name))
	}
	fmt.Fprintf(stdout, "\nRouting: near-tie margin %g; smallest gaps %v", m.Routing.Margin, m.Routing.Gaps)
	if m.Routing.Ties {
		fmt.Fprint(stdout, " (this case tests ties: the lower position wins)")
	}
	fmt.Fprintf(stdout, "\n\nConventions (ref):\n")
	for _, ch := range ref.Choices() {
		fmt.Fprintf(stdout, "  %-28s %s\n", ch.Topic+":", ch.Choice)
	}
	fmt.Fprintf(stdout, "\nArrays: %d; candidates provide the expected.* ones without the prefix (docs/golden-format.md).\n", len(m.Arrays))
	return nil
}

func explainLayer(w io.Writer, title string, l spec.Config) {
	capacity := string(l.Capacity.Kind)
	switch l.Capacity.Kind {
	case spec.CapacityRatio:
		capacity += fmt.Sprintf(" c = %g", l.Capacity.Ratio)
	case spec.CapacityInteger:
		capacity += fmt.Sprintf(" C = %d", l.Capacity.Tokens)
	case spec.CapacityLog:
		capacity += fmt.Sprintf(" c = %g, S_max = %d", l.Capacity.Ratio, l.Capacity.MaxLen)
	}
	b := l.Block
	fmt.Fprintf(w, "%s:\n", title)
	fmt.Fprintf(w, "  router      %s (SPEC.md 2)%s\n", l.Router, cond(l.Jitter > 0, fmt.Sprintf(", jitter s = %g", l.Jitter)))
	if l.Causal == spec.CausalOff {
		fmt.Fprintf(w, "  capacity    %s (SPEC.md 3); top-k per row, ties to the lower position (SPEC.md 4, Eq. 1)\n", capacity)
	} else {
		fmt.Fprintf(w, "  causal      route iff %s > 0, no capacity (SPEC.md 9)\n", map[spec.CausalRouting]string{spec.CausalRouter: "r", spec.CausalPredictor: "q"}[l.Causal])
	}
	fmt.Fprintf(w, "  block f     d = %d, %d heads, d_ff = %d, %s, %s MLP, %s positions%s (SPEC.md 5)\n",
		b.D, b.Heads, b.DFF, b.Norm, b.MLP, b.Positions, cond(l.MLPOnly, ", MLP-only routing"))
	fmt.Fprintf(w, "  weighting   %s (SPEC.md 6); compute %s%s\n", l.Weighting, l.Compute, cond(l.Compute == spec.ComputeDense, " with w = g + sg(m·g − g) (SPEC.md 7)"))
	if l.Aux != spec.AuxNone || l.LoadBalanceWeight > 0 {
		fmt.Fprintf(w, "  auxiliary   %s weight %g, load balancing weight %g (SPEC.md 8)\n", l.Aux, l.AuxWeight, l.LoadBalanceWeight)
	}
}

func cond(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

// runGen implements `modref gen`: regenerate the corpus from ref.
func runGen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", golden.DefaultDir, "corpus directory to write (must exist)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("corpus directory %s does not exist; run from the repository root or pass -dir", *dir)
	}
	cases, err := golden.WriteCorpus(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d cases to %s\n", len(cases), *dir)
	return nil
}
