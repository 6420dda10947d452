package fuzz

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// corpusDir is the committed golden corpus, relative to this package.
const corpusDir = "../golden/corpus"

// snapshot returns the SHA-256 of every regular file under dir, by relative
// path.
func snapshot(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	out := make(map[string][32]byte)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = sha256.Sum256(raw)
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	return out
}

// diffSnapshots describes how two snapshots differ ("" when equal).
func diffSnapshots(before, after map[string][32]byte) string {
	var d []string
	for k, h := range before {
		if h2, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		} else if h2 != h {
			d = append(d, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "created "+k)
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}

// guardWrites records the golden corpus and this package's directory before
// a fuzz target runs and fails the target if either changed when it ends:
// the loaders must never write.
func guardWrites(f *testing.F) {
	corpus, here := snapshot(f, corpusDir), snapshot(f, ".")
	f.Cleanup(func() {
		if d := diffSnapshots(corpus, snapshot(f, corpusDir)); d != "" {
			f.Errorf("the golden corpus changed while fuzzing a loader: %s", d)
		}
		if d := diffSnapshots(here, snapshot(f, ".")); d != "" && !onlyFuzzCache(d) {
			f.Errorf("the fuzz package directory changed while fuzzing a loader: %s", d)
		}
	})
}

// onlyFuzzCache reports whether a difference is new fuzz corpus entries,
// which `go test -fuzz` itself writes into testdata/fuzz on a failure.
func onlyFuzzCache(d string) bool {
	for _, part := range strings.Split(d, ", ") {
		if !strings.HasPrefix(part, "created testdata/fuzz/") {
			return false
		}
	}
	return true
}

// scratchDir returns a temporary directory for one fuzz process's files,
// removed when the target ends. It is on tmpfs (/dev/shm) where the machine
// has one: the loaders read paths, and a file written to disk for every
// execution measured 1.3 ms here, more than the loaders themselves.
func scratchDir(f *testing.F) string {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "modref-fuzz-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// writeTemp empties dir, writes files into it and returns its snapshot.
func writeTemp(t *testing.T, dir string, files map[string][]byte) map[string][32]byte {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return snapshot(t, dir)
}

// checkUnwritten fails t if dir differs from its snapshot.
func checkUnwritten(t *testing.T, dir string, before map[string][32]byte, what string) {
	if d := diffSnapshots(before, snapshot(t, dir)); d != "" {
		t.Fatalf("%s wrote into its directory: %s", what, d)
	}
}

// checkArrays checks that every array ReadNPZ returns is well formed.
func checkArrays(t *testing.T, arrays map[string]*format.Array) {
	for name, a := range arrays {
		n := 1
		for _, d := range a.Shape {
			if d < 0 {
				t.Fatalf("array %q: negative dimension in shape %v", name, a.Shape)
			}
			n *= d
		}
		switch a.DType {
		case "<f8", "<f4":
			if a.I != nil || len(a.F) != n {
				t.Fatalf("array %q (%s, shape %v): %d floats, %d ints, want %d floats", name, a.DType, a.Shape, len(a.F), len(a.I), n)
			}
		case "<i8", "<i4":
			if a.F != nil || len(a.I) != n {
				t.Fatalf("array %q (%s, shape %v): %d floats, %d ints, want %d ints", name, a.DType, a.Shape, len(a.F), len(a.I), n)
			}
		default:
			t.Fatalf("array %q: ReadNPZ returned dtype %q, which it documents as rejected", name, a.DType)
		}
	}
}

// TestReadNPZBoundsHeaderLength checks that ReadNPZ refuses an .npy
// header that declares far more bytes than its file holds (a version-2
// header declares its length as a uint32; here 64 MiB in a 198-byte .npz),
// with an error and without allocating the declared length.
func TestReadNPZBoundsHeaderLength(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("x.npy")
	if err != nil {
		t.Fatal(err)
	}
	const declared = 1 << 26
	h := binary.LittleEndian.AppendUint32([]byte("\x93NUMPY\x02\x00"), declared)
	h = append(h, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n"...)
	if _, err := w.Write(h); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "x.npz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err = format.ReadNPZ(p)
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc
	if err == nil {
		t.Errorf("ReadNPZ accepted a header that declares %d bytes in a %d-byte file", declared, buf.Len())
	}
	if alloc >= declared {
		t.Errorf("ReadNPZ allocated %d MiB for a %d-byte file declaring a %d MiB header", alloc>>20, buf.Len(), declared>>20)
	}
}

// FuzzReadNPZ: format.ReadNPZ on arbitrary file contents returns arrays
// that are well formed, or an error naming the file; it never panics and
// never writes.
func FuzzReadNPZ(f *testing.F) {
	guardWrites(f)
	dir := scratchDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		before := writeTemp(t, dir, map[string][]byte{"c.npz": data})
		path := filepath.Join(dir, "c.npz")
		arrays, err := format.ReadNPZ(path)
		checkUnwritten(t, dir, before, "ReadNPZ")
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadNPZ error does not name the file %s: %v", path, err)
			}
			return
		}
		checkArrays(t, arrays)
	})
}

var caseName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// FuzzManifest: format.ReadManifest on arbitrary JSON returns a manifest
// that satisfies the format's rules (docs/golden-format.md), or an error
// naming the file; it never panics and never writes.
func FuzzManifest(f *testing.F) {
	guardWrites(f)
	dir := scratchDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		before := writeTemp(t, dir, map[string][]byte{"c.json": data})
		path := filepath.Join(dir, "c.json")
		m, err := format.ReadManifest(path)
		checkUnwritten(t, dir, before, "ReadManifest")
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadManifest error does not name the file %s: %v", path, err)
			}
			return
		}
		if m.Format != format.Format || m.Version != format.Version || !caseName.MatchString(m.Name) {
			t.Fatalf("ReadManifest accepted format %q version %d name %q", m.Format, m.Version, m.Name)
		}
		for _, a := range m.Arrays {
			if a.Role == format.RoleExpected && (a.Tolerance == nil || !(a.Tolerance.RTol >= 0) || !(a.Tolerance.ATol >= 0)) {
				t.Fatalf("ReadManifest accepted expected array %q with tolerance %+v", a.Name, a.Tolerance)
			}
		}
	})
}

// selfCandidate returns a case's expected arrays under their candidate names.
func selfCandidate(c *format.Case) map[string]*format.Array {
	cand := make(map[string]*format.Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			cand[format.CandidateName(info.Name)] = c.Arrays[info.Name]
		}
	}
	return cand
}

// FuzzLoad: format.Load on a directory holding a fuzzed NAME.json and
// NAME.npz returns a case or an error, never panics and never writes; a case
// it returns is judged by judge.Compare without a panic, and its own
// expected arrays pass against it; a candidate changed from them as mut
// says is judged without a panic too.
func FuzzLoad(f *testing.F) {
	guardWrites(f)
	dir := scratchDir(f)
	f.Fuzz(func(t *testing.T, name string, manifest, arrays, mut []byte) {
		// A name the file system cannot hold (over 255 bytes with ".json")
		// is the harness's limit, not Load's.
		if !caseName.MatchString(name) || len(name) > 200 {
			name = "case"
		}
		before := writeTemp(t, dir, map[string][]byte{name + ".json": manifest, name + ".npz": arrays})
		c, err := format.Load(dir, name)
		checkUnwritten(t, dir, before, "Load")
		if err != nil {
			return
		}
		res, err := judge.Compare(c, selfCandidate(c), false)
		if err != nil {
			t.Fatalf("Compare of case %s with its own expected arrays: %v", name, err)
		}
		if !res.Pass {
			t.Fatalf("case %s fails against its own expected arrays: %+v", name, res.Arrays)
		}
		cand, changed := mutateCandidate(c, &byteSource{data: mut})
		res, err = judge.Compare(c, cand, len(mut)%2 == 0)
		if err == nil && !changed && !res.Pass {
			t.Fatalf("case %s: unchanged candidate fails: %+v", name, res.Arrays)
		}
	})
}

// TestLoadRefusesShortValidLengths checks that Load refuses a manifest whose
// config.valid_lengths has fewer entries than config.batch (the judge
// indexes it by batch row): the corpus's padding case with one removed.
func TestLoadRefusesShortValidLengths(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(corpusDir, "layer-padding.json"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), "\"valid_lengths\": [\n      10,\n      6\n    ]", "\"valid_lengths\": [\n      10\n    ]", 1)
	if bad == string(raw) {
		t.Fatal("layer-padding.json no longer has valid_lengths [10, 6]; update the reproduction")
	}
	npz, err := os.ReadFile(filepath.Join(corpusDir, "layer-padding.npz"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"layer-padding.json": []byte(bad), "layer-padding.npz": npz} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := format.Load(dir, "layer-padding"); err == nil || !strings.Contains(err.Error(), "valid_lengths") {
		t.Errorf("Load of valid_lengths [10] with batch 2: error %v, want one naming valid_lengths", err)
	}
}

// TestLoadRefusesLayerCaseWithoutLayer checks that Load refuses a kind
// "layer" manifest whose config.layer is null (check and RefCandidate read
// it): layer-paper with config.layer set to null.
func TestLoadRefusesLayerCaseWithoutLayer(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(corpusDir, "layer-paper.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["config"].(map[string]any)["layer"] = nil
	bad, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	npz, err := os.ReadFile(filepath.Join(corpusDir, "layer-paper.npz"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"layer-paper.json": bad, "layer-paper.npz": npz} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := format.Load(dir, "layer-paper"); err == nil || !strings.Contains(err.Error(), "layer") {
		t.Errorf("Load of a layer case with config.layer null: error %v, want one naming the layer", err)
	}
}

// The cases FuzzCompare judges candidates against: a plain layer, padding
// (judged at valid positions only), causal routing, ties, a model and a
// decode case.
var compareCases = []string{"layer-paper", "layer-padding", "layer-causal-router", "layer-ties", "model-every-other", "decode-router"}

var loadCases = sync.OnceValues(func() ([]*format.Case, error) {
	var cs []*format.Case
	for _, n := range compareCases {
		c, err := format.Load(corpusDir, n)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
})

// mutateCandidate changes a copy of the case's own expected arrays as the
// bytes say: values replaced (NaN, ±Inf, near-float32-limit, shifted by a
// tolerance multiple), integer decisions moved, arrays dropped, reshaped or
// converted between float and integer. It reports whether anything changed.
func mutateCandidate(c *format.Case, src *byteSource) (map[string]*format.Array, bool) {
	self := selfCandidate(c)
	names := make([]string, 0, len(self))
	for n := range self {
		names = append(names, n)
	}
	slices.Sort(names)
	cand := make(map[string]*format.Array, len(self))
	for _, n := range names {
		a := self[n]
		cand[n] = &format.Array{Shape: slices.Clone(a.Shape), F: slices.Clone(a.F), I: slices.Clone(a.I), DType: a.DType}
	}
	changed := false
	for range src.Int(0, 6, "mutations") {
		n := names[src.Int(0, len(names)-1, "array")]
		a := cand[n]
		if a == nil {
			continue
		}
		switch src.Int(0, 5, "kind") {
		case 0:
			delete(cand, n)
		case 1: // reshape (a rotation of the dimensions may equal the shape)
			if len(a.Shape) > 0 {
				a.Shape = append(slices.Clone(a.Shape[1:]), a.Shape[0])
			} else {
				a.Shape = []int{1}
			}
		case 2: // float <-> int
			if a.I != nil {
				a.F = make([]float64, len(a.I))
				for k, v := range a.I {
					a.F[k] = float64(v)
				}
				a.I, a.DType = nil, "<f8"
			} else {
				a.I = make([]int64, len(a.F))
				for k, v := range a.F {
					a.I[k] = int64(v)
				}
				a.F, a.DType = nil, "<i8"
			}
		default: // one value
			k := src.Int(0, max(a.Len(), 1)-1, "element")
			if a.I != nil && k < len(a.I) {
				a.I[k] = int64(src.Int(-2, 12, "int value"))
			} else if k < len(a.F) {
				a.F[k] = src.Pick([]float64{math.NaN(), math.Inf(1), math.Inf(-1), maxF32, -maxF32, 0, 1e-3, -1}, "value")
			}
		}
		changed = true // conservatively: an unchanged candidate must pass
	}
	return cand, changed
}

// FuzzCompare: judge.Compare judges any candidate without a panic: one
// read from arbitrary .npz bytes, or the case's own arrays changed as the
// bytes say. An unchanged candidate passes, and every verdict is pass, fail
// or missing.
func FuzzCompare(f *testing.F) {
	guardWrites(f)
	dir := scratchDir(f)
	cases, err := loadCases()
	if err != nil {
		f.Fatalf("loading the golden corpus: %v", err)
	}
	f.Fuzz(func(t *testing.T, which uint8, asNPZ bool, allowMissing bool, data []byte) {
		c := cases[int(which)%len(cases)]
		var cand map[string]*format.Array
		changed := true
		if asNPZ {
			before := writeTemp(t, dir, map[string][]byte{"cand.npz": data})
			cand, err = format.ReadNPZ(filepath.Join(dir, "cand.npz"))
			checkUnwritten(t, dir, before, "ReadNPZ")
			if err != nil {
				return
			}
		} else {
			cand, changed = mutateCandidate(c, &byteSource{data: data})
		}
		res, err := judge.Compare(c, cand, allowMissing)
		if err != nil {
			return
		}
		for _, a := range res.Arrays {
			switch a.Status {
			case judge.StatusPass, judge.StatusFail, judge.StatusMissing:
			default:
				t.Fatalf("array %q: status %q", a.Name, a.Status)
			}
		}
		if !changed && !res.Pass {
			t.Fatalf("case %s: its own expected arrays fail: %s", c.Manifest.Name, fmt.Sprint(res.Arrays))
		}
	})
}
