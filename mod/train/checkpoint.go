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
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/internal/readfile"
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

// checkpointFiles are a checkpoint's files in the order Save writes them.
var checkpointFiles = []string{paramsFile, optimizerFile, trainFile, evalFile, configFile}

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
// written and a crash at any instant leaves a complete checkpoint: the
// files go to a new temporary directory beside dir, config.json last, which
// then replaces dir (internal/atomicfile.ReplaceDir: on Linux one atomic
// exchange). An existing dir that is not a modref checkpoint is refused and
// left as it is.
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
	// A NaN or an infinity, which Load would refuse, is not saved: the
	// run diverged, and the last good checkpoint is worth more.
	for _, ps := range [][]mod.Param{named, moments} {
		if err := finite(ps); err != nil {
			return fmt.Errorf("train: checkpoint: %w", err)
		}
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
// half written. The files are written in checkpointFiles' order, so that a
// temporary directory with a config.json is complete.
func writeDir(dir string, files map[string][]byte) error {
	if _, err := os.Lstat(dir); err == nil {
		if _, err := probeCheckpoint(dir); err != nil {
			return fmt.Errorf("train: not replacing %s: %w", dir, err)
		}
	}
	err := atomicfile.ReplaceDir(dir, func(tmp string) error {
		for _, name := range checkpointFiles {
			if err := atomicfile.WriteFile(filepath.Join(tmp, name), files[name]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	return nil
}

// finite returns an error naming the first NaN or infinity of ps.
func finite(ps []mod.Param) error {
	for _, p := range ps {
		for i, x := range p.T.Data {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("array %s holds %v at [%d %d]: training diverged, and a checkpoint holds finite values only, so it is not saved", p.Name, x, i/p.T.Cols, i%p.T.Cols)
			}
		}
	}
	return nil
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

// probeCheckpoint reads dir's config.json and checks that it is a modref
// checkpoint of this version, returning its bytes.
func probeCheckpoint(dir string) ([]byte, error) {
	path := filepath.Join(dir, configFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
			return nil, fmt.Errorf("checkpoint %s is %s, not a checkpoint directory", dir, readfile.Kind(fi.Mode()))
		} else if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w (not a checkpoint directory)", dir, errors.Unwrap(err))
		}
		return nil, fmt.Errorf("checkpoint %s: no %s (not a modref checkpoint directory)", dir, configFile)
	}
	raw, err := readfile.Read(path, MaxConfigBytes)
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
	return raw, nil
}

// readCheckpoint reads and checks dir's config.json.
func readCheckpoint(dir string) (*Checkpoint, error) {
	raw, err := probeCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, configFile)
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

// CheckCheckpoint returns nil when dir holds a modref training checkpoint
// of this version (its config.json says so; the rest is checked when it is
// loaded), and otherwise an error saying what dir is. It reads one file, so
// a save that replaces dir meanwhile cannot mix two checkpoints in what it
// reads.
func CheckCheckpoint(dir string) error {
	_, err := probeCheckpoint(dir)
	return err
}

// loadArrays fills ps from the .npz file at path, which must hold exactly
// one float32 array of each parameter's shape, every value finite: a NaN or
// an infinity is refused, naming the array and its [row col].
func loadArrays(path string, ps []mod.Param) error {
	arrays, err := format.ReadNPZ(path)
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
		b, err := readfile.Read(filepath.Join(dir, f.name), ck.Config.MetricsBytes())
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
