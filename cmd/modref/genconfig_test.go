package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestGenConfig: gen --print-config gives a corpus case's configuration;
// edited to other sizes and padding it generates a case that check passes
// for modref's own implementation, explain describes, and that lands beside
// the directory's other files; a file of the case's name that gen did not
// write is refused, and a bad configuration is one error naming the field,
// nothing written.
func TestGenConfig(t *testing.T) {
	code, out, errOut := runBin(t, "gen", "--print-config", "layer-softmax")
	if code != 0 {
		t.Fatalf("gen --print-config: exit %d\n%s", code, errOut)
	}
	var g map[string]any
	if err := json.Unmarshal([]byte(out), &g); err != nil || g["name"] != "layer-softmax" {
		t.Fatalf("gen --print-config printed %q (%v)", out, err)
	}
	g["name"], g["seed"], g["description"] = "my-softmax", 3, "Softmax weighting at d = 16 with padding."
	cfg := g["config"].(map[string]any)
	cfg["batch"], cfg["seq_len"], cfg["valid_lengths"] = 3, 12, []int{12, 7, 5}
	layer := cfg["layer"].(map[string]any)
	layer["d_model"], layer["d_ff"] = 16, 32
	delete(layer, "predictor_hidden")
	work := t.TempDir()
	raw, _ := json.Marshal(g)
	file := writeFile(t, work, "mine.json", raw)
	cases := filepath.Join(work, "cases")
	os.Mkdir(cases, 0o755)
	writeFile(t, cases, "notes.txt", []byte("mine"))

	code, out, errOut = runBin(t, "gen", "--config", file, "--out", cases)
	if code != 0 || !strings.Contains(out, "wrote case my-softmax") {
		t.Fatalf("gen --config: exit %d\n%s%s", code, out, errOut)
	}
	if raw, _ := os.ReadFile(filepath.Join(cases, "notes.txt")); string(raw) != "mine" {
		t.Error("gen --config changed a file beside the case")
	}
	code, out, errOut = runBin(t, "check", "--corpus", cases, "my-softmax")
	if code != 0 || !strings.Contains(out, "1 passed, 0 failed") {
		t.Errorf("check of the generated case: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runBin(t, "explain", "--corpus", cases, "my-softmax")
	if code != 0 || !strings.Contains(out, "B = 3, S = 12, valid lengths [12 7 5]") || !strings.Contains(out, "d = 16") {
		t.Errorf("explain of the generated case: exit %d\n%s", code, out)
	}
	// Generating it again replaces gen's own files; a user's file of the
	// case's name is refused.
	if code, _, errOut := runBin(t, "gen", "--config", file, "--out", cases); code != 0 {
		t.Errorf("gen --config again: exit %d\n%s", code, errOut)
	}
	writeFile(t, cases, "my-softmax.npz", []byte("my candidate"))
	expectRefused(t, []string{"gen", "--config", file, "--out", cases}, []string{"my-softmax.npz exists and gen did not write it"}, cases)

	layer["heads"] = 3
	raw, _ = json.Marshal(g)
	bad := writeFile(t, work, "bad.json", raw)
	expectRefused(t, []string{"gen", "--config", bad, "--out", filepath.Join(work, "new")}, []string{"--config", "config.layer.d_model = 16 is not a multiple of config.layer.heads = 3"}, work)
	expectRefused(t, []string{"gen", "--config", file}, []string{"--config needs --out"}, work)
}

// TestGenConfigLlama3Example generates the Llama-3-style layer of
// docs/examples/llama3-layer.json (RMSNorm, SwiGLU, RoPE base 500000,
// grouped-query attention, no biases) as a user would: gen --config writes
// a case that check passes and explain describes with its shared heads; the
// same file with kv_heads not dividing heads is one error naming kv_heads,
// nothing written.
func TestGenConfigLlama3Example(t *testing.T) {
	example, err := filepath.Abs(filepath.Join("..", "..", "docs", "examples", "llama3-layer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := t.TempDir()
	code, out, errOut := runBin(t, "gen", "--config", example, "--out", cases)
	if code != 0 || !strings.Contains(out, "wrote case llama3-layer") {
		t.Fatalf("gen --config %s: exit %d\n%s%s", example, code, out, errOut)
	}
	code, out, errOut = runBin(t, "check", "--corpus", cases, "llama3-layer")
	if code != 0 || !strings.Contains(out, "1 passed, 0 failed") {
		t.Errorf("check of the generated case: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runBin(t, "explain", "--corpus", cases, "llama3-layer")
	for _, want := range []string{"4 heads sharing 1 key and value head,", "swiglu MLP", "rmsnorm", "rope positions (base 500000)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("explain of the generated case: exit %d, no %q in\n%s", code, want, out)
		}
	}

	raw, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bad := writeFile(t, work, "bad.json", []byte(strings.Replace(string(raw), `"kv_heads": 1`, `"kv_heads": 3`, 1)))
	expectRefused(t, []string{"gen", "--config", bad, "--out", filepath.Join(work, "new")}, []string{"--config", "config.layer.kv_heads = 3, want a divisor of config.layer.heads = 4"}, work)
}

// TestGenConfigNamesTheField: every field gen --config validates, made
// invalid in turn, is refused (exit 2, nothing written) with the field
// named as the file writes it (config.layer.d_model, not the Go field D),
// its value and what is allowed; every key of the three kinds' forms is
// in the table, or listed as one that nothing validates.
func TestGenConfigNamesTheField(t *testing.T) {
	skipRaceShort(t, "modrefBin runs gen --config on edited configurations (23 s at a load of 25-30)")
	base := map[string]string{}
	for name, kase := range map[string]string{"layer": "layer-paper", "model": "model-every-other", "mode": "layer-mode-staged"} {
		code, out, errOut := runBin(t, "gen", "--print-config", kase)
		if code != 0 {
			t.Fatalf("gen --print-config %s: exit %d\n%s", kase, code, errOut)
		}
		base[name] = out
	}
	type edit struct {
		path string
		v    any // deleted when nil
	}
	learned := func(layers int) []edit {
		var out []edit
		for l := range layers {
			out = append(out, edit{fmt.Sprintf("config.layers[%d].layer.positions", l), "learned"})
		}
		return out
	}
	manyLayers := func() []edit {
		var m map[string]any
		json.Unmarshal([]byte(base["model"]), &m)
		layers := m["config"].(map[string]any)["layers"].([]any)
		for len(layers) <= 1024 {
			layers = append(layers, layers[1])
		}
		return []edit{{"config.layers", layers}}
	}
	cases := []struct {
		base  string
		edits []edit
		want  string
	}{
		{"layer", []edit{{"name", "My Layer"}}, `name = "My Layer"`},
		{"layer", []edit{{"kind", "block"}}, `kind = "block"`},
		{"layer", []edit{{"precision", "fp8"}}, `precision "fp8"`},
		{"layer", []edit{{"ties", "maybe"}}, `ties = "maybe"`},
		{"layer", []edit{{"threshold", true}}, "threshold = true: a case about the causal threshold is a layer case routed causally"},
		{"layer", []edit{{"threshold", true}, {"config.layer.causal", "router"}, {"config.layer.router", "l2norm"}}, "by a linear router without bias or by the predictor"},
		{"layer", []edit{{"threshold", true}, {"config.layer.causal", "predictor"}, {"config.layer.mlp_only", true}}, "not mlp_only"},
		{"model", []edit{{"threshold", true}}, "threshold = true: a case about the causal threshold is a layer case"},
		{"layer", []edit{{"seed", "one"}}, "seed is a JSON string, want an integer"},
		{"layer", []edit{{"config", nil}}, "config.batch = 0, want >= 1"},
		{"layer", []edit{{"config.batch", 0}}, "config.batch = 0, want >= 1"},
		{"layer", []edit{{"config.seq_len", 0}}, "config.seq_len = 0, want >= 1"},
		{"layer", []edit{{"config.valid_lengths", []int{8}}}, "config.valid_lengths has 1 entries, want one per batch row (config.batch = 2)"},
		{"layer", []edit{{"config.valid_lengths", []int{8, 9}}}, "config.valid_lengths[1] = 9, want 0 <= V_b <= config.seq_len = 8"},
		{"layer", []edit{{"config.layer", nil}}, "a layer case needs config.layer"},
		{"layer", []edit{{"config.layer.d_model", -5}}, "config.layer.d_model = -5, want >= 1"},
		{"layer", []edit{{"config.layer.d_model", "8"}}, "config.layer.d_model is a JSON string, want an integer"},
		{"layer", []edit{{"config.layer.d_model", 1 << 20}}, "config.layer.d_model = 1048576 exceeds the bound 16384 (spec.MaxD)"},
		{"layer", []edit{{"config.layer.heads", 0}}, "config.layer.heads = 0, want >= 1"},
		{"layer", []edit{{"config.layer.heads", 3}}, "config.layer.d_model = 8 is not a multiple of config.layer.heads = 3"},
		{"layer", []edit{{"config.layer.heads", 8}}, "head width config.layer.d_model/heads = 1 is odd"},
		{"layer", []edit{{"config.layer.kv_heads", 3}}, "config.layer.kv_heads = 3, want a divisor of config.layer.heads = 2"},
		{"layer", []edit{{"config.layer.qkv_bias", 1}}, "config.layer.qkv_bias is a JSON number, want true or false"},
		{"layer", []edit{{"config.layer.d_ff", 0}}, "config.layer.d_ff = 0, want >= 1"},
		{"layer", []edit{{"config.layer.d_ff", 1 << 17}}, "config.layer.d_ff = 131072 exceeds the bound 65536 (spec.MaxDFF)"},
		{"layer", []edit{{"config.layer.norm", "batchnorm"}}, `config.layer.norm = "batchnorm", want "rmsnorm" or "layernorm"`},
		{"layer", []edit{{"config.layer.norm_eps", 0}}, "config.layer.norm_eps = 0, want a finite value > 0"},
		{"layer", []edit{{"config.layer.mlp", "relu"}}, `config.layer.mlp = "relu", want "gelu" or "swiglu"`},
		{"layer", []edit{{"config.layer.positions", "alibi"}}, `config.layer.positions = "alibi", want "rope" or "learned"`},
		{"layer", []edit{{"config.layer.rope_base", 1}}, "config.layer.rope_base = 1, want a finite value > 1"},
		{"layer", []edit{{"config.layer.window", -1}}, "config.layer.window = -1, want 0 (no window)"},
		{"layer", []edit{{"config.layer.router", "mlp"}}, `config.layer.router = "mlp", want one of linear`},
		{"layer", []edit{{"config.layer.jitter", -1}}, "config.layer.jitter = -1, want a finite value >= 0"},
		{"layer", []edit{{"config.layer.capacity.kind", "quadratic"}}, `config.layer.capacity.kind = "quadratic", want ratio, integer or log`},
		{"layer", []edit{{"config.layer.capacity.ratio", 1.5}}, "config.layer.capacity.ratio = 1.5, want c in (0, 1]"},
		{"layer", []edit{{"config.layer.capacity", map[string]any{"kind": "log", "ratio": 0.5, "max_len": 1}}}, "config.layer.capacity.max_len = 1 for log scaling, want S_max >= 2"},
		{"layer", []edit{{"config.layer.capacity", map[string]any{"kind": "log", "ratio": 0.5, "max_len": 4}}}, "config.layer.capacity.max_len = 4, want S_max >= 8, the longest valid row"},
		{"layer", []edit{{"config.layer.capacity", map[string]any{"kind": "integer", "tokens": 0}}}, "config.layer.capacity.tokens = 0, want C >= 1"},
		{"layer", []edit{{"config.layer.capacity", map[string]any{"kind": "integer", "tokens": 9}}}, "config.layer.capacity.tokens = 9, want C <= config.seq_len = 8"},
		{"layer", []edit{{"config.layer.weighting", "max"}}, `config.layer.weighting = "max", want one of raw`},
		{"layer", []edit{{"config.layer.compute", "sparse"}}, `config.layer.compute = "sparse", want gather or dense`},
		{"layer", []edit{{"config.layer.mlp_only", "yes"}}, "config.layer.mlp_only is a JSON string, want true or false"},
		{"layer", []edit{{"config.layer.aux", "mse"}}, `config.layer.aux = "mse", want one of none`},
		{"layer", []edit{{"config.layer.aux_weight", -1}}, "config.layer.aux_weight = -1, want a finite value >= 0"},
		{"layer", []edit{{"config.layer.aux_weight", 0.5}}, "config.layer.aux_weight = 0.5 with config.layer.aux = none would be ignored"},
		{"layer", []edit{{"config.layer.load_balance_weight", -1}}, "config.layer.load_balance_weight = -1, want a finite value >= 0"},
		{"layer", []edit{{"config.layer.predictor_hidden", -1}}, "config.layer.predictor_hidden = -1, want >= 0"},
		{"layer", []edit{{"config.layer.predictor_hidden", 1 << 17}}, "config.layer.predictor_hidden = 131072 exceeds the bound 65536"},
		{"layer", []edit{{"config.layer.causal", "sometimes"}}, `config.layer.causal = "sometimes", want off, router or predictor`},
		{"layer", []edit{{"config.layer.causal", "router"}, {"config.layer.weighting", "softmax"}}, `config.layer.weighting = softmax with config.layer.causal = "router"`},
		{"layer", []edit{{"config.layer.causal", "router"}, {"config.layer.compute", "dense"}}, `config.layer.compute = dense with config.layer.causal = "router"`},
		{"model", []edit{{"config.vocab", 1}}, "config.vocab = 1, want >= 2"},
		{"model", []edit{{"config.vocab", 1 << 21}}, "config.vocab = 2097152 exceeds the bound 1048576 (spec.MaxVocab)"},
		{"model", []edit{{"config.layers", []any{}}}, "a model case needs config.layers"},
		{"model", manyLayers(), "config.layers = 1025 exceeds the bound 1024 (spec.MaxLayers)"},
		{"model", []edit{{"config.layers[1].routed", "no"}}, "config.layers.routed is a JSON string, want true or false"},
		{"model", []edit{{"config.max_len", -1}}, "config.max_len = -1, want >= 0"},
		{"model", []edit{{"config.max_len", 1 << 21}}, "config.max_len = 2097152 exceeds the bound 1048576 (spec.MaxPositions)"},
		{"model", learned(4), "config.max_len = 0 with learned position embeddings, want the longest sequence length"},
		{"model", append(learned(4), edit{"config.max_len", 4}), "config.max_len = 4 learned position embeddings for config.seq_len = 8 positions"},
		{"model", []edit{{"config.layers[1].layer.d_ff", 32}}, "config.layers[1].layer.d_ff differs from config.layers[0].layer.d_ff"},
		{"model", []edit{{"config.layers[2].layer.capacity.ratio", 2}}, "config.layers[2].layer.capacity.ratio = 2, want c in (0, 1]"},
		{"model", []edit{{"config.layers[2].layer.capacity", map[string]any{"kind": "integer", "tokens": 9}}}, "config.layers[2].layer.capacity.tokens = 9, want C <= config.seq_len = 8"},
		{"mode", []edit{{"config.mode", nil}}, "a mode case needs config.mode"},
		{"mode", []edit{{"config.valid_lengths", []int{8, 8}}}, "a mode case has no padding (docs/spec.md §14); leave out config.valid_lengths"},
		{"mode", []edit{{"config.mode.d_model", -5}}, "config.mode.d_model = -5, want >= 1"},
		{"mode", []edit{{"config.mode.experts", 0}}, "config.mode.experts = 0, want E >= 1"},
		{"mode", []edit{{"config.mode.experts", 300}}, "config.mode.experts = 300 exceeds the bound 256 (spec.MaxExperts)"},
		{"mode", []edit{{"config.mode.noop_experts", 300}}, "config.mode.noop_experts = 300 exceeds the bound 256"},
		{"mode", []edit{{"config.mode.noop_experts", 1}}, "config.mode.noop_experts = 1 with config.mode.form = staged, want 0"},
		{"mode", []edit{{"config.mode.expert_capacity", 0}}, "config.mode.expert_capacity = 0, want a ratio in (0, 1]"},
		{"mode", []edit{{"config.mode.capacity", 0}}, "config.mode.capacity = 0, want a ratio in (0, 1]"},
		{"mode", []edit{{"config.mode.form", "integrated"}}, "config.mode.noop_experts = 0 with config.mode.form = integrated, want >= 1"},
		{"mode", []edit{{"config.mode.form", "integrated"}, {"config.mode.noop_experts", 1}}, "config.mode.capacity = 0.5 with config.mode.form = integrated, want 0"},
		{"mode", []edit{{"config.mode.form", "mixed"}}, `config.mode.form = "mixed", want staged or integrated`},
	}
	covered := map[string]bool{"description": true} // free text
	for _, c := range cases {
		for _, e := range c.edits {
			covered[e.path[strings.LastIndex(e.path, ".")+1:]] = true
			if m, ok := e.v.(map[string]any); ok {
				for k := range m {
					covered[k] = true
				}
			}
		}
	}
	for name, raw := range base {
		var g map[string]any
		json.Unmarshal([]byte(raw), &g)
		for _, key := range jsonKeys(g) {
			if !covered[key] {
				t.Errorf("the %s form's key %q is in no row of the table", name, key)
			}
		}
	}
	for _, c := range cases {
		var g map[string]any
		if err := json.Unmarshal([]byte(base[c.base]), &g); err != nil {
			t.Fatal(err)
		}
		for _, e := range c.edits {
			setPath(t, g, e.path, e.v)
		}
		raw, _ := json.Marshal(g)
		work := t.TempDir()
		file := writeFile(t, work, "mine.json", raw)
		code, _, errOut := runBin(t, "gen", "--config", file, "--out", filepath.Join(work, "cases"))
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "Go struct") || strings.Contains(errOut, "block:") {
			t.Errorf("%s with %v: exit %d, stderr %q, want exit 2 naming %q", c.base, c.edits, code, errOut, c.want)
		}
		if _, err := os.Stat(filepath.Join(work, "cases")); err == nil {
			t.Errorf("%s with %v: refused, but wrote %s", c.base, c.edits, filepath.Join(work, "cases"))
		}
	}
}

// setPath sets the value at a dotted path of JSON keys (an array's
// element as key[i]) in v, or deletes it when x is nil.
func setPath(t *testing.T, v map[string]any, path string, x any) {
	t.Helper()
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		name, index, isElem := strings.Cut(strings.TrimSuffix(k, "]"), "[")
		next, ok := v[name]
		if isElem {
			i, _ := strconv.Atoi(index)
			next = next.([]any)[i]
		}
		if v, ok = next.(map[string]any); !ok {
			t.Fatalf("%s: no object at %s", path, k)
		}
	}
	if x == nil {
		delete(v, keys[len(keys)-1])
		return
	}
	v[keys[len(keys)-1]] = x
}

// jsonKeys lists the keys of v and of every object in it.
func jsonKeys(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			out = append(append(out, k), jsonKeys(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, jsonKeys(x)...)
		}
	}
	return out
}

// TestGenConfigSaysRoutingMovedApart: at S = 1024 no draw is likely to
// keep its routing clear of a tie, and gen says that it moved the first
// draw's routing apart without redrawing and
// that "ties": "bf16" gives a case holding near-ties; with it, and at the
// corpus's S = 8, gen says nothing of the kind.
func TestGenConfigSaysRoutingMovedApart(t *testing.T) {
	skipRaceShort(t, "modrefBin generates and measures cases (17 s at a load of 25-30)")
	g, _ := paperConfig(t)
	work := t.TempDir()
	gen := func(name string) string {
		t.Helper()
		raw, _ := json.Marshal(g)
		code, out, errOut := runBin(t, "gen", "--config", writeFile(t, work, name+".json", raw), "--out", filepath.Join(work, name))
		if code != 0 {
			t.Fatalf("gen --config %s: exit %d\n%s%s", name, code, out, errOut)
		}
		return out
	}
	if out := gen("short"); strings.Contains(out, "moved") {
		t.Errorf("at S = 8: %s", out)
	}
	g["config"].(map[string]any)["seq_len"] = 1024
	out := gen("long")
	for _, want := range []string{"routing moved apart: the first draw did not keep every routing decision 0.01 clear of a tie, and its router weights put the chance that any of the next 99 is at ", "(at S = 1024", "moved 0.02 away from its routing decisions", `"ties": "bf16" generates a case that does`} {
		if !strings.Contains(out, want) {
			t.Errorf("at S = 1024: no %q in\n%s", want, out)
		}
	}
	g["ties"] = "bf16"
	if out := gen("ties"); strings.Contains(out, "moved") {
		t.Errorf("with \"ties\": \"bf16\": %s", out)
	}
}
