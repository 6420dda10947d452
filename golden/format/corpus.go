package format

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/modref/modref/internal/readfile"
)

// A Corpus is a set of cases: NAME.json manifests, each beside its NAME.npz.
// Embedded is one compiled into the program; Dir is one on disk.
type Corpus struct {
	fsys fs.FS
	// where names the corpus in messages: a directory, or the embedded one.
	where string
	// dir is the directory file paths in messages start with, and for a
	// corpus on disk the one its files are read from.
	dir string
	// embedded says the files are the package's own, read from memory.
	embedded bool
}

// Embedded returns the corpus of the files fsys holds, compiled into the
// program (package golden's go:embed of golden/corpus), named in messages
// as the embedded copy of directory dir. It has no files on disk.
func Embedded(fsys fs.FS, dir string) Corpus {
	return Corpus{fsys: fsys, where: "the embedded corpus", dir: "(embedded) " + dir, embedded: true}
}

// Dir returns the corpus in directory dir ("" is the current directory).
func Dir(dir string) Corpus {
	return Corpus{fsys: os.DirFS(cmp.Or(dir, ".")), where: "corpus " + cmp.Or(dir, "."), dir: dir}
}

// String names the corpus: "the embedded corpus" or "corpus DIR".
func (c Corpus) String() string { return c.where }

// path is the name of a corpus file in messages.
func (c Corpus) path(file string) string { return filepath.Join(c.dir, file) }

// Paths returns the manifest and array file paths of case name in a corpus
// on disk, and two empty strings for the embedded corpus, which has no
// files.
func (c Corpus) Paths(name string) (manifest, arrays string) {
	if c.embedded {
		return "", ""
	}
	return Paths(c.dir, name)
}

// ErrUnknownCase marks a case name a corpus does not hold.
var ErrUnknownCase = errors.New("no such case")

// List returns the names of the corpus's cases, sorted: every NAME.json that
// has a NAME.npz beside it.
func (c Corpus) List() ([]string, error) {
	entries, err := fs.ReadDir(c.fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c, UnwrapPath(err))
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		if _, err := fs.Stat(c.fsys, name+".npz"); err == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s holds no cases (NAME.json with NAME.npz)", c)
	}
	return names, nil
}

// Select returns the cases of the corpus whose names match any of the
// patterns (path.Match globs: "layer-*", "decode-?adding", or a whole
// name), sorted; no patterns select every case. A pattern that matches no
// case is an error: a malformed one names its syntax error, an unmatched
// one is an ErrUnknownCase error listing the names nearest to it. This is
// the selection of modref list PATTERN..., which the Python helper's pytest
// cases use (golden/python).
func (c Corpus) Select(patterns ...string) ([]string, error) {
	names, err := c.List()
	if err != nil || len(patterns) == 0 {
		return names, err
	}
	var out []string
	for _, pat := range patterns {
		matched := false
		for _, name := range names {
			ok, err := path.Match(pat, name)
			if err != nil {
				return nil, fmt.Errorf("pattern %q: %w", pat, err)
			}
			if ok {
				matched = true
				out = append(out, name)
			}
		}
		if !matched {
			return nil, c.unknown(pat)
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// Manifest reads and validates case name's manifest. A name the corpus
// does not hold is an ErrUnknownCase error that lists the names nearest to
// it.
func (c Corpus) Manifest(name string) (*Manifest, error) {
	file := name + ".json"
	if !fs.ValidPath(file) || strings.Contains(name, "/") {
		return nil, c.unknown(name)
	}
	raw, err := c.readFile(file, MaxManifestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, c.unknown(name)
	}
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.path(file), err)
	}
	if m.Name != name {
		return nil, fmt.Errorf("%s: name is %q, want %q as in the file name", c.path(file), m.Name, name)
	}
	return m, nil
}

// unknown is the error for a case name the corpus does not hold.
func (c Corpus) unknown(name string) error {
	names, err := c.List()
	if err != nil {
		return fmt.Errorf("case %q: %w", name, err)
	}
	if near := nearNames(name, names); len(near) > 0 {
		return fmt.Errorf("%w %q in %s; did you mean %s?", ErrUnknownCase, name, c, strings.Join(near, ", "))
	}
	return fmt.Errorf("%w %q in %s (it holds %d cases)", ErrUnknownCase, name, c, len(names))
}

// Load reads case name and checks that its arrays are exactly those its
// manifest lists, with the listed dtypes and shapes, finite, and agreeing
// with the configuration's sizes (ErrManifestArrays). A name the corpus
// does not hold is an ErrUnknownCase error that lists the names nearest to
// it. A corpus on disk may come from anywhere (--corpus), so its files are
// read as untrusted: regular files only, within size bounds, the arrays
// together at most MaxCaseElements values, each allocated only after its
// declared size is checked, the configuration's parameters exactly those
// its param.* arrays hold and its recomputation within MaxRecomputeWork
// (docs/golden-format.md).
func (c Corpus) Load(name string) (*Case, error) { return c.load(name, false) }

// LoadJudged is Load keeping only what judge.Compare reads: the expected
// arrays and the integer arrays (valid lengths, token ids, targets). The
// float inputs, parameters and upstream gradients are checked as Load
// checks them, every value finite included, a chunk at a time, and left
// out of the case's Arrays: for `modref check` of a candidate, whose
// verdict needs none of them, in a third less memory at production shapes
// (docs/performance.md). Whatever recomputes the case (judge.JudgeFlips,
// a precision profile's family, diagnose) needs Load.
func (c Corpus) LoadJudged(name string) (*Case, error) { return c.load(name, true) }

// load is Load, keeping only the arrays LoadJudged keeps when judgedOnly.
func (c Corpus) load(name string, judgedOnly bool) (*Case, error) {
	m, err := c.Manifest(name)
	if err != nil {
		return nil, err
	}
	mfile, afile := name+".json", name+".npz"
	apath := c.path(afile)
	counts, err := m.CheckBounds()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.path(mfile), err)
	}
	plan := &readPlan{arrays: counts, refuseOthers: true, what: mfile}
	if judgedOnly {
		plan.unkept = map[string]bool{}
		for _, info := range m.Arrays {
			if info.Role != RoleExpected && info.DType != "<i8" {
				plan.unkept[info.Name] = true
			}
		}
	}
	arrays, err := c.readNPZ(afile, plan)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool)
	for _, info := range m.Arrays {
		listed[info.Name] = true
		a, ok := arrays[info.Name]
		if !ok {
			return nil, fmt.Errorf("%s: array %q listed in %s is missing", apath, info.Name, mfile)
		}
		if a.DType != info.DType || !slices.Equal(a.Shape, info.Shape) {
			return nil, fmt.Errorf("%s: array %q is %s %v, the manifest says %s %v",
				apath, info.Name, a.DType, a.Shape, info.DType, info.Shape)
		}
		if k := a.FirstNonFinite(); k >= 0 {
			return nil, fmt.Errorf("%s: array %q holds %v at %v", apath, info.Name, a.F[k], a.Index(k))
		}
	}
	for n := range arrays {
		if !listed[n] {
			return nil, fmt.Errorf("%s: array %q is not listed in %s", apath, n, mfile)
		}
	}
	for n := range plan.unkept {
		delete(arrays, n) // checked above, without values
	}
	cs := &Case{Manifest: m, Arrays: arrays}
	if err := cs.checkSizes(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.path(mfile), err)
	}
	return cs, nil
}

// readFile reads a corpus file of at most maxBytes: from memory for the
// embedded corpus, and through readfile.Read (regular files only, never
// blocking on a FIFO) for one on disk.
func (c Corpus) readFile(file string, maxBytes int64) ([]byte, error) {
	if c.embedded {
		raw, err := fs.ReadFile(c.fsys, file)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", c.path(file), UnwrapPath(err))
		}
		return raw, nil
	}
	return readfile.Read(c.path(file), maxBytes)
}

// readNPZ reads the arrays of a corpus .npz as plan says: decoded from
// memory for the embedded corpus, and through readNPZFile for one on disk.
func (c Corpus) readNPZ(file string, plan *readPlan) (map[string]*Array, error) {
	if !c.embedded {
		return readNPZFile(c.path(file), plan)
	}
	raw, err := c.readFile(file, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	arrays, err := readNPZ(bytes.NewReader(raw), int64(len(raw)), plan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.path(file), err)
	}
	return arrays, nil
}

// nearNames returns the names a mistyped name probably meant, nearest
// first: those it is a part of (a prefix such as "layer-causal", or a word
// such as "ties"), and those within a few edits of it (about one in four
// characters, at least two).
func nearNames(name string, names []string) []string {
	type near struct {
		name string
		dist int
	}
	var found []near
	limit := max(2, len(name)/4)
	for _, n := range names {
		d := editDistance(name, n)
		if name != "" && strings.Contains(n, name) {
			d = min(d, 1)
		}
		if d <= limit {
			found = append(found, near{n, d})
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].dist < found[j].dist })
	out := make([]string, 0, min(len(found), 5))
	for _, f := range found[:min(len(found), 5)] {
		out = append(out, f.name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
