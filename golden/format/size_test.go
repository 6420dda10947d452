package format

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/modref/modref/spec"
)

// editManifest copies case name of the committed corpus into a new
// directory with its manifest changed by edit (on its JSON form, so that
// fields the Go types would refuse can be written), and its .npz replaced
// by bytes that are no archive: a refusal that names the manifest shows
// that the arrays were never read.
func editManifest(t *testing.T, name string, edit func(m map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("../corpus", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name+".json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".npz"), []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setShapes sets dimension k of every listed array but the parameters
// whose dimension k is from to to.
func setShapes(m map[string]any, k int, from, to float64) {
	for _, a := range m["arrays"].([]any) {
		shape := a.(map[string]any)["shape"].([]any)
		name := a.(map[string]any)["name"].(string)
		if !strings.HasPrefix(name, "param.") && len(shape) > k && shape[k].(float64) == from {
			shape[k] = to
		}
	}
}

// TestManifestSizeBounds checks that a manifest whose configuration is far
// larger than the arrays it lists, beyond spec's size bounds, or whose
// recomputation would exceed maxRecomputeWork is refused by Load before
// its arrays are read, with the field or the sizes named; and that every
// committed case is within the bounds.
func TestManifestSizeBounds(t *testing.T) {
	layer := func(m map[string]any) map[string]any { return m["config"].(map[string]any)["layer"].(map[string]any) }
	for _, c := range []struct {
		name, kase string
		edit       func(map[string]any)
		want       []string
		is         error
	}{
		{"huge d_ff", "layer-paper", func(m map[string]any) { layer(m)["d_ff"] = 1 << 26 }, []string{"config.layer.d_ff = 67108864 exceeds the bound 65536"}, nil},
		{"wide d_ff", "layer-paper", func(m map[string]any) { layer(m)["d_ff"] = 1 << 16 },
			[]string{"the configuration has 1048856 parameter values, its param.* arrays hold 536"}, ErrManifestArrays},
		{"huge d_model", "layer-paper", func(m map[string]any) { layer(m)["d_model"] = 1 << 40 }, []string{"config.layer.d_model = 1099511627776 exceeds the bound 16384"}, nil},
		{"model d_model", "model-every-other", func(m map[string]any) {
			for _, l := range m["config"].(map[string]any)["layers"].([]any) {
				l.(map[string]any)["layer"].(map[string]any)["d_model"] = 1024
				l.(map[string]any)["layer"].(map[string]any)["heads"] = 2
			}
		}, []string{"parameter values, its param.* arrays hold"}, ErrManifestArrays},
		{"huge vocab", "model-every-other", func(m map[string]any) { m["config"].(map[string]any)["vocab"] = 1 << 30 }, []string{"config.vocab = 1073741824 exceeds the bound 1048576"}, nil},
		{"many experts", "layer-mode-staged", func(m map[string]any) { m["config"].(map[string]any)["mode"].(map[string]any)["experts"] = 1 << 20 }, []string{"config.mode.experts = 1048576 exceeds the bound 256"}, nil},
		// Arrays within maxCaseElements (2·65536·8 values each) whose
		// sequence length makes the attention's work quadratic: 2·S·d per
		// token, 1.4e11 multiply-adds per forward.
		{"long sequence", "layer-paper", func(m map[string]any) {
			m["config"].(map[string]any)["seq_len"] = 65536
			setShapes(m, 1, 8, 65536)
		}, []string{"recomputing the case would take about", "more than the 17592186044416 accepted", "seq_len 65536"}, ErrTooLarge},
	} {
		dir := editManifest(t, c.kase, c.edit)
		_, err := Load(dir, c.kase)
		if err == nil {
			t.Errorf("%s: loaded", c.name)
			continue
		}
		for _, w := range append(c.want, c.kase+".json") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, w)
			}
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: error %v is not %v", c.name, err, c.is)
		}
	}
	// The committed cases, and the work the slowest needs (which the
	// bound's comment quotes).
	names, err := List("../corpus")
	if err != nil {
		t.Fatal(err)
	}
	most, slowest := 0.0, ""
	for _, name := range names {
		c, err := Load("../corpus", name)
		if err != nil {
			t.Fatal(err)
		}
		if w := FDWork(c.Manifest); w > most {
			most, slowest = w, name
		}
	}
	if slowest != "layer-capacity-floor" || most < 1.7e9 || most > 1.9e9 {
		t.Errorf("the slowest committed case by finite differences is %s at %.3g multiply-adds; maxFDWork's comment says layer-capacity-floor at 1.8e9", slowest, most)
	}
	// The production-shaped examples the bound's comment quotes.
	for _, ex := range []struct {
		file     string
		low, top float64
	}{
		{"llama3-layer-d512-s2048.json", 4.5e11, 4.7e11},
		{"llama3-8b-layer-s2048.json", 9.0e12, 9.2e12},
	} {
		raw, err := os.ReadFile("../../docs/examples/" + ex.file)
		if err != nil {
			t.Fatal(err)
		}
		var g struct {
			Kind   string     `json:"kind"`
			Config CaseConfig `json:"config"`
		}
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatal(err)
		}
		if w := RecomputeWork(&Manifest{Kind: g.Kind, Config: g.Config}); w < ex.low || w > ex.top || w > MaxRecomputeWork {
			t.Errorf("%s takes %.3g multiply-adds; MaxRecomputeWork's comment says %.2g", ex.file, w, ex.low)
		}
	}
}

// TestParallelEmulations: the emulations run one per processor while their
// estimated memory leaves room under maxGenMemory, fewer when it does not
// (200000 rows of 8 tokens of a d = 8 layer: one at a time), and never none.
func TestParallelEmulations(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	layer := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
	small := &Manifest{Kind: KindLayer, Config: CaseConfig{Batch: 2, SeqLen: 8, Layer: &layer}}
	if n := ParallelEmulations(small); n != 4 {
		t.Errorf("a small case runs %d emulations at once, want 4 (GOMAXPROCS)", n)
	}
	rows := &Manifest{Kind: KindLayer, Config: CaseConfig{Batch: 200000, SeqLen: 8, Layer: &layer}}
	fixed, per := GenMemory(rows)
	if fixed+per > MaxGenMemory || fixed+2*per <= MaxGenMemory {
		t.Fatalf("200000 rows of 8 tokens are estimated at %.3g bytes and %.3g per emulation: want room for one emulation, not two", fixed, per)
	}
	if n := ParallelEmulations(rows); n != 1 {
		t.Errorf("200000 rows of 8 tokens run %d emulations at once, want 1", n)
	}
	huge := &Manifest{Kind: KindLayer, Config: CaseConfig{Batch: 1 << 20, SeqLen: 8, Layer: &layer}}
	if n := ParallelEmulations(huge); n != 1 {
		t.Errorf("a case past maxGenMemory (diagnose of a manifest gen would refuse) runs %d emulations at once, want 1", n)
	}
}

// TestGatheredTokens: a layer case whose block runs only on the tokens
// top-k selects is counted at ⌈c·S⌉ + 1 tokens a row (C + 1 for an integer
// capacity), at most S, which is at least ref's k (⌊c·S⌋ or ⌈c·S⌉) plus
// the one capacity_off_by_one adds; every other layer case, whose block
// may run on every token, is not.
func TestGatheredTokens(t *testing.T) {
	base := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.125)
	for _, c := range []struct {
		name string
		seq  int
		edit func(*spec.Config)
		k    float64
		ok   bool
	}{
		{"ratio 1/8 at S = 2048", 2048, func(*spec.Config) {}, 257, true},
		{"ratio 1/2 at S = 7", 7, func(c *spec.Config) { c.Capacity.Ratio = 0.5 }, 5, true},
		{"ratio 1 at S = 8", 8, func(c *spec.Config) { c.Capacity.Ratio = 1 }, 8, true},
		{"integer 3 at S = 16", 16, func(c *spec.Config) { c.Capacity = spec.Capacity{Kind: spec.CapacityInteger, Tokens: 3} }, 4, true},
		{"dense compute", 16, func(c *spec.Config) { c.Compute = spec.ComputeDense }, 0, false},
		{"causal routing", 16, func(c *spec.Config) { c.Causal = spec.CausalRouter }, 0, false},
		{"MLP only", 16, func(c *spec.Config) { c.MLPOnly = true }, 0, false},
	} {
		cfg := base
		c.edit(&cfg)
		k, ok := gatheredTokens(&Manifest{Kind: KindLayer, Config: CaseConfig{Batch: 1, SeqLen: c.seq, Layer: &cfg}})
		if k != c.k || ok != c.ok {
			t.Errorf("%s: counted at %g tokens a row (%v), want %g (%v)", c.name, k, ok, c.k, c.ok)
		}
	}
}
