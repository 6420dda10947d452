package format

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/modref/modref/internal/race"
	"github.com/modref/modref/spec"
)

// drawSize draws a size against bound from s: the committed value (half
// the time), bound − 1, bound, bound + 1, a power of two up to 2^62, zero
// or negative, or spread over [1, 2·bound].
func drawSize(s *bytesSource, committed, bound int) int {
	switch s.byte() % 16 {
	case 8:
		return bound - 1
	case 9:
		return bound
	case 10:
		return bound + 1
	case 11:
		return 1 << (s.byte() % 63)
	case 12:
		return -int(s.byte())
	case 13:
		return 1 + int(uint64(s.byte())<<8|uint64(s.byte()))*(2*bound/65536+1)
	}
	return committed
}

// sizeCases are the committed manifests the generator starts from: a
// layer, a model and a MoDE case.
var sizeCases = []string{"layer-paper", "model-every-other", "layer-mode-staged"}

// genManifest returns the JSON of a committed manifest with its sizes
// redrawn as s says: the block's d_model, heads and d_ff (every layer's, in
// a model), vocab, the number of experts, and batch and seq_len, the last
// two carried into the shapes of the arrays they size (so that a case
// within maxCaseElements can still ask for too much recomputation); then
// a few bytes flipped. It also returns the base case's name.
func genManifest(t testing.TB, s *bytesSource) ([]byte, string) {
	name := sizeCases[s.intn(len(sizeCases))]
	raw, err := os.ReadFile("../corpus/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	cfg := m["config"].(map[string]any)
	var blocks []map[string]any
	switch {
	case cfg["layer"] != nil:
		blocks = append(blocks, cfg["layer"].(map[string]any))
	case cfg["mode"] != nil:
		mode := cfg["mode"].(map[string]any)
		blocks = append(blocks, mode)
		mode["experts"] = drawSize(s, int(mode["experts"].(float64)), spec.MaxExperts)
	default:
		for _, l := range cfg["layers"].([]any) {
			blocks = append(blocks, l.(map[string]any)["layer"].(map[string]any))
		}
		cfg["vocab"] = drawSize(s, int(cfg["vocab"].(float64)), spec.MaxVocab)
	}
	d := drawSize(s, int(blocks[0]["d_model"].(float64)), spec.MaxD)
	heads := []int{1, 2, 4}[s.intn(3)]
	dff := drawSize(s, int(blocks[0]["d_ff"].(float64)), spec.MaxDFF)
	for _, b := range blocks {
		b["d_model"], b["heads"], b["d_ff"] = d, heads, dff
	}
	batch, seq := int(cfg["batch"].(float64)), int(cfg["seq_len"].(float64))
	newBatch, newSeq := drawSize(s, batch, MaxCaseElements), drawSize(s, seq, MaxCaseElements)
	cfg["batch"], cfg["seq_len"] = newBatch, newSeq
	if cfg["valid_lengths"] != nil && newBatch != batch {
		delete(cfg, "valid_lengths")
	}
	for _, a := range m["arrays"].([]any) {
		a := a.(map[string]any)
		if strings.HasPrefix(a["name"].(string), "param.") {
			continue
		}
		shape := a["shape"].([]any)
		if len(shape) > 0 && int(shape[0].(float64)) == batch {
			shape[0] = newBatch
		}
		if len(shape) > 1 && int(shape[1].(float64)) == seq {
			shape[1] = newSeq
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for range s.byte() % 4 {
		out[int(uint64(s.byte())<<8|uint64(s.byte()))%len(out)] = s.byte()
	}
	return out, name
}

// checkManifestBounds is FuzzManifestBounds's property: the manifest
// reader (decodeManifest and checkBounds, all Load does before it reads
// the arrays) never panics, and what it accepts keeps every bound: spec's
// size bounds, maxCaseElements values together, exactly the configuration's
// parameter count in param.* arrays, and RecomputeWork within
// maxRecomputeWork. It returns the reader's error.
func checkManifestBounds(t testing.TB, raw []byte) error {
	m, err := decodeManifest(raw)
	if err != nil {
		return err
	}
	counts, err := m.CheckBounds()
	if err != nil {
		return err
	}
	cfg := m.Config
	var blocks []spec.BlockConfig
	switch m.Kind {
	case KindLayer:
		blocks = append(blocks, cfg.Layer.Block)
	case KindMoDE:
		blocks = append(blocks, cfg.MoDE.Block)
		if cfg.MoDE.Experts > spec.MaxExperts || cfg.MoDE.NoOpExperts > spec.MaxExperts {
			t.Fatalf("accepted %d experts and %d no-op experts, above the bound %d", cfg.MoDE.Experts, cfg.MoDE.NoOpExperts, spec.MaxExperts)
		}
	default:
		if cfg.Vocab > spec.MaxVocab || len(cfg.Layers) > spec.MaxLayers || cfg.MaxLen > spec.MaxPositions {
			t.Fatalf("accepted vocab %d, %d layers, max_len %d: above a bound", cfg.Vocab, len(cfg.Layers), cfg.MaxLen)
		}
		for _, l := range cfg.Layers {
			blocks = append(blocks, l.Config.Block)
		}
	}
	for _, b := range blocks {
		if b.D > spec.MaxD || b.DFF > spec.MaxDFF {
			t.Fatalf("accepted d_model %d, d_ff %d: above a bound", b.D, b.DFF)
		}
	}
	total, params := 0, int64(0)
	for name, n := range counts {
		total += n
		if strings.HasPrefix(name, "param.") {
			params += int64(n)
		}
	}
	if total > MaxCaseElements || params != ParamCount(m) {
		t.Fatalf("accepted %d values in its arrays, %d in param.* for a configuration of %d parameters", total, params, ParamCount(m))
	}
	if w := RecomputeWork(m); !(w <= MaxRecomputeWork) {
		t.Fatalf("accepted a case whose recomputation takes %.3g multiply-adds", w)
	}
	return nil
}

// FuzzManifestBounds: the corpus manifest reader's bounds on generated and
// mutated manifests (see genManifest and checkManifestBounds).
func FuzzManifestBounds(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, _ := genManifest(t, &bytesSource{b: data})
		checkManifestBounds(t, raw)
	})
}

// TestGeneratedManifestsReachBounds runs FuzzManifestBounds's property on
// 3000 inputs of pseudo-random bytes and fails unless the generator drew
// d_model, d_ff, vocab and the number of experts at their bounds and one
// past them, manifests refused for their parameter count, for their
// arrays' size and for their recomputation, and manifests accepted.
func TestGeneratedManifestsReachBounds(t *testing.T) {
	race.SkipShort(t, "3000 manifests read on one goroutine, where the race detector has nothing to watch (150 s at a load of 28-30); go test ./golden/format runs it")
	rng := rand.New(rand.NewPCG(22, 16))
	count := map[string]int{}
	for range 3000 {
		data := make([]byte, 32)
		for k := range data {
			data[k] = byte(rng.Uint32())
		}
		data[len(data)-1] = 0 // most manifests unmutated past their sizes
		raw, _ := genManifest(t, &bytesSource{b: data})
		err := checkManifestBounds(t, raw)
		var m struct {
			Config struct {
				Vocab int
				Layer struct {
					DModel int `json:"d_model"`
					DFF    int `json:"d_ff"`
				}
				Mode struct{ Experts int }
			}
		}
		if json.Unmarshal(raw, &m) == nil {
			c := m.Config
			count["vocab"+against(c.Vocab, spec.MaxVocab)]++
			count["d_model"+against(c.Layer.DModel, spec.MaxD)]++
			count["d_ff"+against(c.Layer.DFF, spec.MaxDFF)]++
			count["experts"+against(c.Mode.Experts, spec.MaxExperts)]++
		}
		switch {
		case err == nil:
			count["accepted"]++
		case errors.Is(err, ErrManifestArrays):
			count["refused: parameter count"]++
		case errors.Is(err, ErrTooLarge) && strings.Contains(err.Error(), "recomputing"):
			count["refused: recomputation"]++
		case errors.Is(err, ErrTooLarge):
			count["refused: array values"]++
		}
	}
	for _, k := range []string{"d_model at", "d_model past", "d_ff at", "d_ff past", "vocab at", "vocab past", "experts at", "experts past",
		"accepted", "refused: parameter count", "refused: recomputation", "refused: array values"} {
		if count[k] == 0 {
			t.Errorf("%q: none in 3000 generated manifests", k)
		}
	}
	t.Logf("%v", count)
}

// against names where v stands against bound: " at", " past" or "".
func against(v, bound int) string {
	switch v {
	case bound:
		return " at"
	case bound + 1:
		return " past"
	}
	return ""
}
