package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/internal/readfile"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// runList implements `modref list`: one line per case.
func runList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("list", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref list [--corpus DIR] [--json] [--kind K] [--router R] ... [PATTERN...]

Lists the golden corpus's cases: name, kind and what each tests. Patterns
(globs such as 'layer-*', or whole names) select the cases whose names match
any of them; a pattern matching no case is an error. The other flags keep
the cases that hold a value: --kind model, --router l2norm, --pattern
every_other (in any routed layer of a model); a value no selected case
holds is an error that lists the values they do hold. --json prints each
case's name, kind, description, configuration and catches.

flags:
`)
		fs.PrintDefaults()
	}
	corpus := corpusFlag(fs)
	asJSON := fs.Bool("json", false, "print the cases as JSON: name, kind, description, config, catches")
	want := map[string]string{}
	for _, f := range caseFilters {
		fs.Func(f.name, "keep the cases holding this `value` as "+f.usage, func(v string) error {
			if v == "" {
				return errors.New("want a value")
			}
			want[f.name] = v
			return nil
		})
	}
	patterns, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	names, err := corpus().Select(patterns...)
	if err != nil {
		return err
	}
	manifests := map[string]*format.Manifest{}
	for _, name := range names {
		if manifests[name], err = corpus().Manifest(name); err != nil {
			return err
		}
	}
	if names, err = filterCases(names, manifests, want); err != nil {
		return err
	}
	if *asJSON {
		type listed struct {
			Name        string            `json:"name"`
			Kind        string            `json:"kind"`
			Description string            `json:"description"`
			Config      format.CaseConfig `json:"config"`
			Catches     []string          `json:"catches"`
		}
		out := make([]listed, 0, len(names))
		for _, name := range names {
			m := manifests[name]
			out = append(out, listed{m.Name, m.Kind, m.Description, m.Config, m.Catches})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tkind\twhat it tests")
	for _, name := range names {
		m := manifests[name]
		desc, _, _ := strings.Cut(m.Description, ": ")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, m.Kind, desc)
	}
	return tw.Flush()
}

// runExplain implements `modref explain CASE`: the configuration, the
// equations involved, what the case catches and the conventions it assumes.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("explain", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref explain [--corpus DIR] CASE

Shows a case's configuration, the equations of docs/spec.md it involves,
the deviations it catches and the conventions it assumes.

flags:
`)
		fs.PrintDefaults()
	}
	corpus := corpusFlag(fs)
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		fmt.Fprintln(stderr, "usage: modref explain [--corpus DIR] CASE")
		return errUsage
	}
	c, err := corpus().Load(names[0])
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
	if cfg.MoDE != nil {
		explainMoDE(stdout, *cfg.MoDE)
	}
	for l, ml := range cfg.Layers {
		if ml.Routed {
			explainLayer(stdout, fmt.Sprintf("Layer %d (routed)", l), ml.Config)
		} else {
			fmt.Fprintf(stdout, "Layer %d: dense pre-norm block (docs/spec.md §5 with every token)\n", l)
		}
	}
	if cfg.Vocab > 0 {
		fmt.Fprintf(stdout, "Model: vocabulary %d, embedding, the layers above, final norm, LM head, mean cross-entropy over valid targets (docs/spec.md §10)\n", cfg.Vocab)
	}
	fmt.Fprintf(stdout, "\nLoss whose gradients the grad.* arrays hold: %s\n", m.Loss)
	fmt.Fprintf(stdout, "\nCatches (docs/spec.md §11):\n")
	for _, name := range m.Catches {
		fmt.Fprintf(stdout, "  %-24s %s\n", name, format.DeviationDescription(name))
	}
	fmt.Fprintf(stdout, "\nRouting: near-tie margin %g; smallest gaps %v", m.Routing.Margin, m.Routing.Gaps)
	if m.Routing.Ties {
		fmt.Fprint(stdout, " (this case tests ties: the lower position wins)")
	}
	fmt.Fprintf(stdout, "\n\nConventions (ref):\n")
	for _, ch := range ref.Choices() {
		fmt.Fprintf(stdout, "  %-28s %s\n", ch.Topic+":", ch.Choice)
	}
	fmt.Fprintf(stdout, "\nArrays: %d. A candidate writes the expected.* ones without the prefix (docs/golden-format.md):\n", len(m.Arrays))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  array\tshape\tdtype\t")
	for _, info := range m.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		dtype := "float32 or float64"
		if c.Arrays[info.Name].IsInt() {
			dtype = "int64 (or int32)"
		}
		fmt.Fprintf(tw, "  %s\t%v\t%s\t%s\n", format.CandidateName(info.Name), info.Shape, dtype, cond(judge.Optional(c, info.Name), "optional: judged only when written"))
	}
	return tw.Flush()
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
	fmt.Fprintf(w, "  router      %s (docs/spec.md §2)%s\n", l.Router, cond(l.Jitter > 0, fmt.Sprintf(", jitter s = %g", l.Jitter)))
	if l.Causal == spec.CausalOff {
		fmt.Fprintf(w, "  capacity    %s (docs/spec.md §3); top-k per row, ties to the lower position (docs/spec.md §4, Eq. 1)\n", capacity)
	} else {
		fmt.Fprintf(w, "  causal      route iff %s > 0, no capacity (docs/spec.md §9)\n", map[spec.CausalRouting]string{spec.CausalRouter: "r", spec.CausalPredictor: "q"}[l.Causal])
	}
	fmt.Fprintf(w, "  block f     d = %d, %s, d_ff = %d, %s, %s MLP, %s positions%s%s (docs/spec.md §5)\n",
		b.D, heads(b), b.DFF, b.Norm, b.MLP, b.Positions,
		cond(b.Positions == spec.PositionRoPE && b.RoPEBase != 10000, fmt.Sprintf(" (base %s)", strconv.FormatFloat(b.RoPEBase, 'f', -1, 64))), cond(l.MLPOnly, ", MLP-only routing"))
	fmt.Fprintf(w, "  weighting   %s (docs/spec.md §6); compute %s%s\n", l.Weighting, l.Compute, cond(l.Compute == spec.ComputeDense, " with w = g + sg(m·g − g) (docs/spec.md §7)"))
	if l.Aux != spec.AuxNone || l.LoadBalanceWeight > 0 {
		fmt.Fprintf(w, "  auxiliary   %s weight %g, load balancing weight %g (docs/spec.md §8)\n", l.Aux, l.AuxWeight, l.LoadBalanceWeight)
	}
}

func explainMoDE(w io.Writer, c spec.MoDEConfig) {
	b := c.Block
	fmt.Fprintf(w, "Mixture-of-Depths-and-Experts layer, %s form (docs/spec.md §14):\n", c.Form)
	if c.Form == spec.MoDEStaged {
		fmt.Fprintf(w, "  MoD router  linear, capacity ratio c = %g, top-k per row, raw weighting, gather (docs/spec.md §2 to §6)\n", c.Capacity)
	}
	fmt.Fprintf(w, "  attention   d = %d, %s, %s, %s positions%s\n", b.D, heads(b), b.Norm, b.Positions,
		cond(c.Form == spec.MoDEIntegrated, ", over every token"))
	fmt.Fprintf(w, "  experts     %d %s MLPs of d_ff = %d%s; expert choice, softmax gates of N2(h)·W_g, each expert takes k_e = clamp(⌊%g·n⌋, 1, n) tokens\n",
		c.Experts, b.MLP, b.DFF, cond(c.NoOpExperts > 0, fmt.Sprintf(" and %d no-op", c.NoOpExperts)), c.ExpertCapacity)
}

// heads describes a block's attention heads: "2 heads", or with
// grouped-query attention "4 heads sharing 2 key and value heads", and
// their biases under QKVBias.
func heads(b spec.BlockConfig) string {
	bias := cond(b.QKVBias, " with biases on q, k and v")
	if b.KVHeadCount() == b.Heads {
		return fmt.Sprintf("%d heads%s", b.Heads, bias)
	}
	return fmt.Sprintf("%d heads sharing %d key and value head%s%s", b.Heads, b.KVHeadCount(), cond(b.KVHeadCount() > 1, "s"), bias)
}

func cond(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

// runGen implements `modref gen`: regenerate the corpus from ref.
func runGen(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gen", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref gen [--out DIR] [--keep-others]
       modref gen --config FILE --out DIR
       modref gen --print-config CASE

Regenerates every case of the golden corpus from ref and writes it to DIR
as NAME.json and NAME.npz (docs/golden-format.md); DIR is created if it
does not exist. The cases are the same bits on every machine (docs/spec.md
§12), so this also puts the corpus modref carries on disk, for example for
a Python harness to read. Without --out, gen rewrites golden/corpus of the
modref checkout it runs in, and refuses to run outside one; the corpus
built into modref changes only when modref is built again.

gen removes only files it wrote: it records them in DIR/.modref-gen, and
refuses a directory holding anything else (nothing is written) unless
--keep-others, which writes the cases beside the other files. gen writes
inside DIR, which keeps its mode, owner and group (it may be a mount
point), and locks DIR while it writes: a second gen into DIR meanwhile is
refused as in use.

With --config FILE, gen generates one case of your own configuration
instead: FILE is JSON with the case's name, kind (layer, model, decode or
mode), seed and config, in a manifest's vocabulary (docs/golden-format.md);
--print-config CASE prints any corpus case's as a starting point. The case
is drawn clear of ties, its tolerances are the corpus's and its catches
are measured by emulating each deviation; its two files go into DIR beside
what DIR holds, over no file gen did not write. check, diagnose and explain
read it with --corpus DIR.

flags:
`)
		fs.PrintDefaults()
	}
	var dir string
	set := func(s string) error {
		if s == "" {
			return errors.New("want a directory")
		}
		dir = s
		return nil
	}
	fs.Func("out", "write the cases to directory `DIR`", set)
	fs.Func("dir", "the same as --out `DIR`", set)
	keep := fs.Bool("keep-others", false, "write the cases beside files in DIR that gen did not write, instead of refusing DIR")
	configFile := fs.String("config", "", "generate the one case this JSON `FILE` configures (see --print-config)")
	printConfig := fs.String("print-config", "", "print the configuration that generates corpus case `CASE`, and stop")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, name := range []string{"config", "print-config"} {
		if err := refuseEmpty(fs, name); err != nil {
			return err
		}
	}
	switch {
	case *printConfig != "" && (*configFile != "" || dir != "" || *keep):
		return fmt.Errorf("--print-config prints a case's configuration and writes nothing; it cannot be combined with --config, --out or --keep-others")
	case *printConfig != "":
		g, err := golden.GenConfigOf(golden.Embedded(), *printConfig)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(g)
	case *configFile != "":
		return genFromConfig(*configFile, dir, *keep, stdout)
	}
	opt := golden.WriteOptions{KeepOthers: *keep, Tolerances: modcase.Float32Tolerances}
	if dir == "" {
		var err error
		if dir, err = checkoutCorpus(); err != nil {
			return err
		}
		opt.Checkout = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	cases, err := golden.WriteCorpus(dir, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d cases to %s\n", len(cases), dir)
	return nil
}

// genGCPercent is the garbage collector's GOGC while gen --config
// generates a case, unless the environment sets GOGC: the heap is then
// mostly B×S×d arrays of floats, which hold no pointers and cost a
// collection little to scan, and at the default 100 the heap grows to
// twice what is live (the case, the kept truth and an emulation's
// arrays) before a collection. At 25 the d = 512, S = 2048 example peaked
// at 0.67-0.71 GB instead of 0.99-1.00 GB for the same CPU time
// (docs/performance.md, issue 35).
const genGCPercent = 25

// genFromConfig implements gen --config FILE --out DIR.
func genFromConfig(file, dir string, keep bool, stdout io.Writer) error {
	if dir == "" {
		return fmt.Errorf("--config needs --out DIR, the directory to write the case into")
	}
	if keep {
		return fmt.Errorf("--keep-others is for the corpus; --config always writes beside what DIR holds")
	}
	raw, err := readfile.Read(file, golden.MaxGenConfigBytes)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	g, err := golden.DecodeGenConfig(raw)
	if err != nil {
		return fmt.Errorf("--config %s: %w", file, err)
	}
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(genGCPercent))
	}
	c, err := golden.GenerateFromConfig(g, modcase.Float32Tolerances)
	if err != nil {
		return fmt.Errorf("--config %s: %w", file, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	if err := golden.WriteGenerated(dir, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote case %s to %s (catches %s); judge with: modref check --corpus %s --candidate FILE.npz %s\n",
		g.Name, dir, strings.Join(c.Manifest.Catches, ", "), dir, g.Name)
	if c.Separation != "" {
		fmt.Fprintf(stdout, "routing moved apart: %s\n", c.Separation)
	}
	return nil
}

// checkoutCorpus returns the corpus directory of the modref checkout that
// holds the current directory: golden.DefaultDir under the nearest
// directory above it with a go.mod, which must be modref's.
func checkoutCorpus() (string, error) {
	const refuse = "without --out, gen rewrites the corpus of a modref checkout, and %s; run it inside one, or pass --out DIR"
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf(refuse, "the current directory is unknown ("+err.Error()+")")
	}
	for {
		raw, err := readfile.Read(filepath.Join(dir, "go.mod"), maxGoModBytes)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf(refuse, "its go.mod cannot be read: "+err.Error())
		}
		if err == nil {
			if !modrefModule.Match(raw) {
				return "", fmt.Errorf(refuse, filepath.Join(dir, "go.mod")+" is not modref's")
			}
			corpus := filepath.Join(dir, golden.DefaultDir)
			if fi, err := os.Stat(corpus); err != nil || !fi.IsDir() {
				return "", fmt.Errorf(refuse, "this checkout has no "+golden.DefaultDir)
			}
			return corpus, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf(refuse, "no go.mod is above the current directory")
		}
		dir = parent
	}
}

// maxGoModBytes bounds the go.mod gen reads to find the checkout; modref's
// is under 2 KB.
const maxGoModBytes = 1 << 20

// modrefModule matches the module line of modref's go.mod.
var modrefModule = regexp.MustCompile(`(?m)^module\s+github\.com/modref/modref\s*$`)
