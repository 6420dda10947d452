package golden

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// embedded holds the files of golden/corpus as this package was built, so
// that a program importing golden (and the installed modref command) carries
// the corpus wherever it runs.
//
//go:embed corpus/*.json corpus/*.npz
var embedded embed.FS

// A Corpus is a set of cases: NAME.json manifests, each beside its NAME.npz.
// Embedded is the corpus this package carries; Dir is one on disk.
type Corpus struct {
	fsys fs.FS
	// where names the corpus in messages: a directory, or the embedded one.
	where string
	// dir is the directory file paths in messages start with.
	dir string
}

// Embedded returns the golden corpus this package was built with: the
// files of golden/corpus at its module version, compiled into the program.
func Embedded() Corpus {
	sub, err := fs.Sub(embedded, "corpus")
	if err != nil {
		panic("golden.Embedded: " + err.Error()) // "corpus" is a valid path
	}
	return Corpus{fsys: sub, where: "the embedded corpus", dir: "(embedded) " + DefaultDir}
}

// Dir returns the corpus in directory dir ("" is the current directory).
func Dir(dir string) Corpus {
	return Corpus{fsys: os.DirFS(cmp.Or(dir, ".")), where: "corpus " + cmp.Or(dir, "."), dir: dir}
}

// String names the corpus: "the embedded corpus" or "corpus DIR".
func (c Corpus) String() string { return c.where }

// path is the name of a corpus file in messages.
func (c Corpus) path(file string) string { return filepath.Join(c.dir, file) }

// ErrUnknownCase marks a case name a corpus does not hold.
var ErrUnknownCase = errors.New("no such case")

// List returns the names of the corpus's cases, sorted: every NAME.json that
// has a NAME.npz beside it.
func (c Corpus) List() ([]string, error) {
	entries, err := fs.ReadDir(c.fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c, unwrapPath(err))
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

// Manifest reads and validates case name's manifest. A name the corpus
// does not hold is an ErrUnknownCase error that lists the names nearest to
// it.
func (c Corpus) Manifest(name string) (*Manifest, error) {
	file := name + ".json"
	if !fs.ValidPath(file) || strings.Contains(name, "/") {
		return nil, c.unknown(name)
	}
	raw, err := fs.ReadFile(c.fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, c.unknown(name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.path(file), unwrapPath(err))
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
// manifest lists, with the listed dtypes and shapes, and finite. A name the
// corpus does not hold is an ErrUnknownCase error that lists the names
// nearest to it.
func (c Corpus) Load(name string) (*Case, error) {
	m, err := c.Manifest(name)
	if err != nil {
		return nil, err
	}
	mfile, afile := name+".json", name+".npz"
	apath := c.path(afile)
	raw, err := fs.ReadFile(c.fsys, afile)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", apath, unwrapPath(err))
	}
	arrays, err := decodeNPZ(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", apath, err)
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
		if k := a.firstNonFinite(); k >= 0 {
			return nil, fmt.Errorf("%s: array %q holds %v at %v", apath, info.Name, a.F[k], a.Index(k))
		}
	}
	for n := range arrays {
		if !listed[n] {
			return nil, fmt.Errorf("%s: array %q is not listed in %s", apath, n, mfile)
		}
	}
	return &Case{Manifest: m, Arrays: arrays}, nil
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
