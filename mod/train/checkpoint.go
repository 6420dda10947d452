package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/sbinet/npyio/npz"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/golden"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/nn"
)

// CheckpointFormat and CheckpointVersion identify a checkpoint's
// config.json; Load refuses any other.
const (
	CheckpointFormat  = "modref-train-checkpoint"
	CheckpointVersion = 1
)

// A checkpoint is a directory of five files:
//
//	config.json    Checkpoint: format, version, Config, text, counters, RNG state
//	params.npz     the model's parameters by mod's names, float32, shape rows×cols
//	optimizer.npz  AdamW's moments, "m.<name>" and "v.<name>", float32
//	train.jsonl    Metrics.Steps, one JSON object a line
//	eval.jsonl     Metrics.Evals
//
// numpy.load reads the .npz files.
const (
	configFile    = "config.json"
	paramsFile    = "params.npz"
	optimizerFile = "optimizer.npz"
	trainFile     = "train.jsonl"
	evalFile      = "eval.jsonl"
)

// Checkpoint is the content of a checkpoint's config.json.
type Checkpoint struct {
	Format  string
	Version int
	Config  Config
	Text    TextInfo
	// Step, Tokens, FLOPs and WallSeconds are the trainer's counters.
	Step        int
	Tokens      int64
	FLOPs       float64
	WallSeconds float64
	// RNG is the state of the generator of batches and noise
	// (math/rand/v2.PCG.MarshalBinary).
	RNG []byte
	// AdamWSteps is the optimiser's step count.
	AdamWSteps int
}

// Save writes a checkpoint of the trainer to dir so that it is never half
// written: the files go to dir+".new", which then replaces dir (an existing
// dir is first renamed to dir+".old" and removed after the swap).
func (t *Trainer) Save(dir string) error {
	rng, err := t.src.MarshalBinary()
	if err != nil {
		return fmt.Errorf("train: saving the generator state: %w", err)
	}
	ck := Checkpoint{Format: CheckpointFormat, Version: CheckpointVersion, Config: t.cfg, Text: t.text,
		Step: t.step, Tokens: t.tokens, FLOPs: t.flops, WallSeconds: t.wall.Seconds(), RNG: rng}
	st := t.opt.State()
	ck.AdamWSteps = st.T
	files := map[string][]byte{}
	if files[configFile], err = json.MarshalIndent(ck, "", "  "); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	named := t.model.Params()
	moments := make([]mod.Param, 0, 2*len(named))
	for k, p := range named {
		moments = append(moments,
			mod.Param{Name: "m." + p.Name, T: autograd.New(p.T.Rows, p.T.Cols, st.M[k])},
			mod.Param{Name: "v." + p.Name, T: autograd.New(p.T.Rows, p.T.Cols, st.V[k])})
	}
	if files[paramsFile], err = encodeNPZ(named); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if files[optimizerFile], err = encodeNPZ(moments); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	var tb, eb bytes.Buffer
	if err := WriteJSONL(&tb, t.metrics.Steps); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := WriteJSONL(&eb, t.metrics.Evals); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	files[trainFile], files[evalFile] = tb.Bytes(), eb.Bytes()
	return writeDir(dir, files)
}

// writeDir replaces dir by a directory holding files, never leaving dir
// half written.
func writeDir(dir string, files map[string][]byte) error {
	tmp, old := dir+".new", dir+".old"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	for name, data := range files {
		if err := writeSynced(filepath.Join(tmp, name), data); err != nil {
			return fmt.Errorf("train: checkpoint: %w", err)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("train: checkpoint: %w", err)
		}
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("train: checkpoint: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("train: checkpoint: removing the previous one: %w", err)
	}
	return nil
}

// writeSynced writes data to a new file and flushes it to disk.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// encodeNPZ returns an .npz archive of the parameters as float32 arrays of
// shape rows×cols, in the given order.
func encodeNPZ(ps []mod.Param) ([]byte, error) {
	var buf bytes.Buffer
	w := npz.NewWriter(&buf)
	for _, p := range ps {
		// npyio writes a Go array of arrays with its shape.
		v := reflect.New(reflect.ArrayOf(p.T.Rows, reflect.ArrayOf(p.T.Cols, reflect.TypeFor[float32]()))).Elem()
		for r := range p.T.Rows {
			reflect.Copy(v.Index(r), reflect.ValueOf(p.T.Data[r*p.T.Cols:(r+1)*p.T.Cols]))
		}
		if err := w.Write(p.Name+".npy", v.Interface()); err != nil {
			return nil, fmt.Errorf("array %s: %w", p.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readCheckpoint reads and checks dir's config.json.
func readCheckpoint(dir string) (*Checkpoint, error) {
	path := filepath.Join(dir, configFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir + ".old"); serr == nil {
			return nil, fmt.Errorf("checkpoint %s is missing but %s.old exists: a save was interrupted; rename %s.old to %s", dir, dir, dir, dir)
		}
		return nil, fmt.Errorf("checkpoint %s: no %s (not a checkpoint directory)", dir, configFile)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var probe struct {
		Format  string
		Version int
	}
	if err := json.Unmarshal(raw, &probe); err != nil || probe.Format != CheckpointFormat {
		return nil, fmt.Errorf("checkpoint %s is not a modref training checkpoint (want Format %q)", path, CheckpointFormat)
	}
	if probe.Version != CheckpointVersion {
		return nil, fmt.Errorf("checkpoint %s has version %d; this modref reads version %d", path, probe.Version, CheckpointVersion)
	}
	var ck Checkpoint
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ck); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := ck.Config.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: config: %w", path, err)
	}
	if ck.Step < 0 || ck.Step > ck.Config.Steps || ck.AdamWSteps != ck.Step {
		return nil, fmt.Errorf("checkpoint %s: Step = %d and AdamWSteps = %d, want equal and in [0, Steps = %d]", path, ck.Step, ck.AdamWSteps, ck.Config.Steps)
	}
	return &ck, nil
}

// loadArrays fills ps from the .npz file at path, which must hold exactly
// one float32 array of each parameter's shape, every value finite: a NaN or
// an infinity is refused, naming the array and its [row col].
func loadArrays(path string, ps []mod.Param) error {
	arrays, err := golden.ReadNPZ(path)
	if err != nil {
		return fmt.Errorf("checkpoint %w", err)
	}
	for _, p := range ps {
		a, ok := arrays[p.Name]
		switch {
		case !ok:
			return fmt.Errorf("checkpoint %s: no array %s (%dx%d)", path, p.Name, p.T.Rows, p.T.Cols)
		case a.DType != "<f4":
			return fmt.Errorf("checkpoint %s: array %s has dtype %s, want float32 (<f4)", path, p.Name, a.DType)
		case len(a.Shape) != 2 || a.Shape[0] != p.T.Rows || a.Shape[1] != p.T.Cols:
			return fmt.Errorf("checkpoint %s: array %s has shape %v, want [%d %d]", path, p.Name, a.Shape, p.T.Rows, p.T.Cols)
		}
		for i, x := range a.F {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("checkpoint %s: array %s holds %v at [%d %d]; a checkpoint's parameters and moments are finite", path, p.Name, x, i/p.T.Cols, i%p.T.Cols)
			}
			p.T.Data[i] = float32(x)
		}
		delete(arrays, p.Name)
	}
	for name := range arrays {
		return fmt.Errorf("checkpoint %s: array %s belongs to no parameter of this configuration", path, name)
	}
	return nil
}

// LoadModel reads the model of a checkpoint, checking every array's name,
// shape and dtype, and returns it with the checkpoint's config.json.
func LoadModel(dir string) (*mod.Model, *Checkpoint, error) {
	ck, err := readCheckpoint(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("train: %w", err)
	}
	m, err := mod.NewModel(ck.Config.Model, ck.Config.Seed)
	if err != nil {
		return nil, nil, fmt.Errorf("train: %w", err)
	}
	if err := loadArrays(filepath.Join(dir, paramsFile), m.Params()); err != nil {
		return nil, nil, fmt.Errorf("train: %w", err)
	}
	return m, ck, nil
}

// Load returns a trainer that continues the checkpoint in dir on text,
// which must be the text the checkpoint was trained on (same length and
// SHA-256). Continuing computes the same bits as a run that never stopped.
func Load(dir string, text Text) (*Trainer, error) {
	m, ck, err := LoadModel(dir)
	if err != nil {
		return nil, err
	}
	if info := text.Info(); info.Bytes != ck.Text.Bytes || info.SHA256 != ck.Text.SHA256 {
		return nil, fmt.Errorf("train: checkpoint %s was trained on %s (%d bytes, SHA-256 %s), but the text given is %s (%d bytes, SHA-256 %s)",
			dir, ck.Text.Name, ck.Text.Bytes, ck.Text.SHA256, info.Name, info.Bytes, info.SHA256)
	}
	t, err := New(ck.Config, text)
	if err != nil {
		return nil, err
	}
	named := t.model.Params()
	for k, p := range m.Params() {
		copy(named[k].T.Data, p.T.Data)
	}
	st := nn.AdamWState{T: ck.AdamWSteps}
	moments := make([]mod.Param, 0, 2*len(named))
	for _, p := range named {
		mt := autograd.New(p.T.Rows, p.T.Cols, nil)
		vt := autograd.New(p.T.Rows, p.T.Cols, nil)
		st.M, st.V = append(st.M, mt.Data), append(st.V, vt.Data)
		moments = append(moments, mod.Param{Name: "m." + p.Name, T: mt}, mod.Param{Name: "v." + p.Name, T: vt})
	}
	if err := loadArrays(filepath.Join(dir, optimizerFile), moments); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := t.opt.SetState(st); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	src := new(rand.PCG)
	if err := src.UnmarshalBinary(ck.RNG); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: RNG state: %w", dir, err)
	}
	t.src, t.rng = src, rand.New(src)
	for _, f := range []struct {
		name string
		read func([]byte) error
	}{
		{trainFile, func(b []byte) (err error) { t.metrics.Steps, err = ReadJSONL[Step](b); return err }},
		{evalFile, func(b []byte) (err error) { t.metrics.Evals, err = ReadJSONL[Eval](b); return err }},
	} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err == nil {
			err = f.read(b)
		}
		if err != nil {
			return nil, fmt.Errorf("train: checkpoint %s: %s: %w", dir, f.name, err)
		}
	}
	if len(t.metrics.Steps) != ck.Step {
		return nil, fmt.Errorf("train: checkpoint %s: %s has %d steps, config.json says %d", dir, trainFile, len(t.metrics.Steps), ck.Step)
	}
	t.step, t.tokens, t.flops = ck.Step, ck.Tokens, ck.FLOPs
	t.wall = time.Duration(ck.WallSeconds * float64(time.Second))
	return t, nil
}
