package train

import (
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modref/modref/internal/race"
	"github.com/modref/modref/spec"
)

// The fuzz targets of the two readers of a training configuration: the
// `modref train --config` file (DecodeConfig, then Validate) and a
// checkpoint's config.json (readCheckpoint). Their inputs are not raw
// bytes alone: a generator turns the fuzz input into a configuration whose
// every size is drawn small, at its bound, one past it, a power of two up
// to 2^62, or negative, so that each bound is reached from both sides
// (TestGeneratedConfigsReachBounds counts it), and then flips a few bytes of
// its JSON as the rest of the input says. fuzz/run.sh runs them.

// draws decodes a fuzz input, one byte per choice; an exhausted input reads
// zeros.
type draws struct {
	data []byte
	pos  int
}

func (d *draws) byte() byte {
	if d.pos >= len(d.data) {
		return 0
	}
	d.pos++
	return d.data[d.pos-1]
}

// size draws a size against bound: small (half the time), bound − 1,
// bound, bound + 1, a power of two up to 2^62, zero or negative, or spread
// over [1, 2·bound].
func (d *draws) size(small, bound int) int {
	switch d.byte() % 16 {
	case 8:
		return bound - 1
	case 9:
		return bound
	case 10:
		return bound + 1
	case 11:
		return 1 << (d.byte() % 63)
	case 12:
		return -int(d.byte())
	case 13:
		return 1 + int(uint64(d.byte())<<8|uint64(d.byte()))*(2*bound/65536+1)
	}
	return small
}

// genConfig is the configuration the input draws: the tiny model of the
// tests with its sizes redrawn, every layer sharing one block.
func genConfig(t testing.TB, d *draws) Config {
	cfg := tinyConfig(t, 6)
	block := cfg.Model.Layers[0].Config.Block
	block.D = d.size(block.D, spec.MaxD)
	block.Heads = []int{1, 2, 4}[int(d.byte())%3]
	block.DFF = d.size(block.DFF, spec.MaxDFF)
	if d.byte()%4 == 0 {
		block.Positions = spec.PositionLearned
		cfg.Model.MaxLen = d.size(64, spec.MaxPositions)
	}
	// A layer list of up to MaxLayers + 1 (a longer one is no different to
	// the reader and slow to write).
	n := d.size(2, spec.MaxLayers)
	if n < 1 || n > spec.MaxLayers+1 {
		n = 2
	}
	layers := make([]spec.ModelLayer, n)
	for l := range layers {
		layers[l] = cfg.Model.Layers[l%len(cfg.Model.Layers)]
		layers[l].Config.Block = block
	}
	cfg.Model.Layers = layers
	if d.byte()%4 == 0 {
		cfg.Model.Layers[0].Config.PredictorHidden = d.size(8, spec.MaxDFF)
	}
	cfg.Steps = d.size(6, MaxSteps)
	cfg.Warmup = min(cfg.Warmup, max(cfg.Steps, 0))
	cfg.Batch = d.size(4, MaxBatch)
	cfg.SeqLen = d.size(32, MaxSeqLen)
	cfg.EvalBatches = d.size(2, MaxEvalBatches)
	cfg.EvalEvery = d.size(10, MaxSteps)
	return cfg
}

// genJSON returns v's JSON with a few bytes changed as the input says.
func genJSON(t testing.TB, d *draws, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for range d.byte() % 4 {
		raw[int(uint64(d.byte())<<8|uint64(d.byte()))%len(raw)] = d.byte()
	}
	return raw
}

// boundsKept fails t unless every size of an accepted cfg is within its
// bound and the memory it implies within MaxMemoryBytes.
func boundsKept(t testing.TB, what string, cfg Config) {
	b := cfg.Model.Block()
	for _, c := range []struct {
		name      string
		v, bound  int
		inclusive bool
	}{
		{"D", b.D, spec.MaxD, true}, {"DFF", b.DFF, spec.MaxDFF, true},
		{"layers", len(cfg.Model.Layers), spec.MaxLayers, true}, {"MaxLen", cfg.Model.MaxLen, spec.MaxPositions, true},
		{"PredictorHidden", cfg.Model.Layers[0].Config.PredictorHidden, spec.MaxDFF, true},
		{"Steps", cfg.Steps, MaxSteps, true}, {"Batch", cfg.Batch, MaxBatch, true},
		{"SeqLen", cfg.SeqLen, MaxSeqLen, true}, {"EvalBatches", cfg.EvalBatches, MaxEvalBatches, true},
	} {
		if c.v > c.bound {
			t.Fatalf("%s accepted %s = %d, above its bound %d", what, c.name, c.v, c.bound)
		}
	}
	if est := cfg.EstimatedBytes(); !(est <= MaxMemoryBytes) {
		t.Fatalf("%s accepted a configuration needing about %.3g bytes, above MaxMemoryBytes", what, est)
	}
	if n := cfg.Model.ParamCount(); n < 1 {
		t.Fatalf("%s accepted a configuration of %d parameters", what, n)
	}
}

// checkTrainConfig is FuzzTrainConfig's property: the `train --config`
// reader, DecodeConfig over the defaults and then Validate, never panics
// and accepts only configurations within every bound. It returns the
// configuration drawn and whether it was accepted.
func checkTrainConfig(t testing.TB, data []byte) (Config, bool) {
	d := &draws{data: data}
	gen := genConfig(t, d)
	raw := genJSON(t, d, gen)
	cfg := DefaultConfig()
	err := DecodeConfig(raw, &cfg)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return gen, false
	}
	boundsKept(t, "the --config reader", cfg)
	return gen, true
}

// FuzzTrainConfig: the `modref train --config` reader on generated and
// mutated configurations (see checkTrainConfig).
func FuzzTrainConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { checkTrainConfig(t, data) })
}

// checkCheckpointConfig is FuzzCheckpointConfig's property: readCheckpoint
// on a config.json holding a generated Checkpoint (format, version, the
// drawn configuration, drawn counters), its JSON mutated, never panics,
// never writes, names the file when it refuses, and accepts only a
// configuration within every bound with Step in [0, Steps].
func checkCheckpointConfig(t testing.TB, dir string, data []byte) (Config, bool) {
	d := &draws{data: data}
	gen := genConfig(t, d)
	step := d.size(3, MaxSteps)
	ck := Checkpoint{Format: CheckpointFormat, Version: CheckpointVersion, Config: gen, Step: step, AdamWSteps: step,
		Text: TextInfo{Name: "t.txt", Bytes: 4500}, RNG: []byte{1, 2, 3}}
	raw := genJSON(t, d, ck)
	path := filepath.Join(dir, configFile)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readCheckpoint(dir)
	after, rerr := os.ReadFile(path)
	if ents, _ := os.ReadDir(dir); rerr != nil || sha256.Sum256(after) != sha256.Sum256(raw) || len(ents) != 1 {
		t.Fatalf("readCheckpoint changed its directory (%d entries, %v)", len(ents), rerr)
	}
	if err != nil {
		if !strings.Contains(err.Error(), dir) {
			t.Fatalf("readCheckpoint's error does not name the checkpoint %s: %v", dir, err)
		}
		return gen, false
	}
	boundsKept(t, "readCheckpoint", got.Config)
	if got.Step < 0 || got.Step > got.Config.Steps {
		t.Fatalf("readCheckpoint accepted Step = %d of %d", got.Step, got.Config.Steps)
	}
	return gen, true
}

// FuzzCheckpointConfig: a checkpoint's config.json reader on generated
// and mutated checkpoints (see checkCheckpointConfig).
func FuzzCheckpointConfig(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) { checkCheckpointConfig(t, dir, data) })
}

// TestGeneratedConfigsReachBounds runs both properties on 2000 inputs of
// pseudo-random bytes and fails unless, for every bound, some drawn
// configurations have the size at its bound and some one past it (which
// each property checks is refused), and some are accepted: the generator
// reaches every bound from both sides.
func TestGeneratedConfigsReachBounds(t *testing.T) {
	race.SkipShort(t, "2000 configurations read on one goroutine, where the race detector has nothing to watch (270 s at a load of 17-32); go test ./mod/train runs it")
	rng := rand.New(rand.NewPCG(22, 22))
	dir := t.TempDir()
	type side struct{ at, past int }
	seen := map[string]*side{}
	sizes := func(c Config) map[string][2]int {
		b := c.Model.Layers[0].Config.Block
		return map[string][2]int{
			"D": {b.D, spec.MaxD}, "DFF": {b.DFF, spec.MaxDFF}, "layers": {len(c.Model.Layers), spec.MaxLayers},
			"Steps": {c.Steps, MaxSteps}, "Batch": {c.Batch, MaxBatch}, "SeqLen": {c.SeqLen, MaxSeqLen},
			"EvalBatches": {c.EvalBatches, MaxEvalBatches},
		}
	}
	accepted := 0
	for i := range 2000 {
		data := make([]byte, 64)
		for k := range data {
			data[k] = byte(rng.Uint32())
			if k%8 == 7 && rng.IntN(2) == 0 {
				data[k] = 0 // mostly unmutated JSON
			}
		}
		var gen Config
		var ok bool
		if i%2 == 0 {
			gen, ok = checkTrainConfig(t, data)
		} else {
			gen, ok = checkCheckpointConfig(t, dir, data)
		}
		if ok {
			accepted++
		}
		for name, vb := range sizes(gen) {
			s := seen[name]
			if s == nil {
				s = &side{}
				seen[name] = s
			}
			if vb[0] == vb[1] {
				s.at++
			}
			if vb[0] == vb[1]+1 {
				s.past++
			}
		}
	}
	for name, s := range seen {
		if s.at == 0 || s.past == 0 {
			t.Errorf("%s: %d configurations at the bound, %d one past it; want both", name, s.at, s.past)
		}
	}
	if accepted == 0 {
		t.Errorf("no generated configuration was accepted")
	}
	t.Logf("%d of 2000 accepted; at and past each bound: %v", accepted, func() map[string]side {
		m := map[string]side{}
		for k, v := range seen {
			m[k] = *v
		}
		return m
	}())
}
