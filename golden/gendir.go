package golden

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/internal/dirlock"
	"github.com/modref/modref/internal/readfile"
)

// GenRecord is the name of the file in which WriteCorpus records what it
// wrote into a directory (docs/golden-format.md, "gen's directory"): each
// file's name and SHA-256, so that a later gen replaces or removes exactly
// those files and nothing else.
const GenRecord = ".modref-gen"

// genRecordFormat identifies a GenRecord file.
const genRecordFormat = "modref-gen"

// maxGenRecordBytes bounds a GenRecord file; the corpus's is about 10 KB.
const maxGenRecordBytes = 1 << 20

// genRecord is the content of a GenRecord file. Files maps a file's name to
// the SHA-256 of each content gen wrote under it and has not removed since:
// two while a write is under way, one otherwise. Temporaries are the
// temporary files a write under way creates in the directory, and Next the
// temporary name through which the next record is written: recorded before
// they are created, so that the next gen removes what a kill left of them,
// and no other file, even one named like a temporary (internal/atomicfile).
type genRecord struct {
	Format      string              `json:"format"`
	Files       map[string][]string `json:"files"`
	Temporaries []string            `json:"temporaries,omitempty"`
	Next        string              `json:"next,omitempty"`
}

// WriteOptions say how WriteCorpus treats what a directory already holds.
type WriteOptions struct {
	// Checkout says that the directory is the corpus of a modref checkout
	// (modref gen without --out), whose every NAME.json and NAME.npz is
	// gen's by construction.
	Checkout bool
	// KeepOthers writes the cases beside files gen did not write instead of
	// refusing the directory: each file of the corpus is then replaced on
	// its own, and the others are left as they are.
	KeepOthers bool
	// Tolerances sets the cases' float32 tolerances (Generate).
	Tolerances Tolerancer
}

// WriteCorpus generates every case and writes it into dir, which must
// exist, removing only files that gen wrote: those its GenRecord lists with
// the content it wrote, those that hold exactly what gen writes now under
// their name, and, with opt.Checkout, every NAME.json and NAME.npz. A
// directory holding anything else is refused, nothing written, unless
// opt.KeepOthers. dir is locked for the whole of it (internal/dirlock): a
// second gen into it is refused at once. The files are written inside dir
// (writeInto), never by replacing dir, so that dir keeps its inode, mode,
// owner and group, and may be a mount point.
func WriteCorpus(dir string, opt WriteOptions) ([]*format.Case, error) {
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("corpus directory %s: %w", dir, format.UnwrapPath(err))
	}
	rec, err := readGenRecord(dir)
	if err != nil {
		return nil, err
	}
	// Before the cases are generated (seconds), what cannot be gen's: a
	// file that is not regular, or whose name is no case's file and not in
	// the record. The embedded corpus has the names Generate gives.
	if !opt.KeepOthers {
		names, err := Embedded().List()
		if err != nil {
			return nil, err
		}
		var others []string
		for _, e := range entries {
			if !keepOut(e.Name(), rec, opt.Checkout) && cannotBeGens(e, names, rec, opt.Checkout) {
				others = append(others, e.Name())
			}
		}
		if len(others) > 0 {
			return nil, refuseOthers(dir, others)
		}
	}
	cases, err := Generate(opt.Tolerances)
	if err != nil {
		return nil, err
	}
	want := map[string][]byte{}
	var order []string
	for _, c := range cases {
		files, err := c.Files()
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			want[f.Name] = f.Data
			order = append(order, f.Name)
		}
	}
	var ours, others []string
	for _, e := range entries {
		switch name := e.Name(); {
		case keepOut(name, rec, opt.Checkout):
		case isGens(dir, e, rec, want, opt.Checkout):
			ours = append(ours, name)
		default:
			others = append(others, name)
		}
	}
	if len(others) > 0 && !opt.KeepOthers {
		return nil, refuseOthers(dir, others)
	}
	for _, name := range others {
		if _, ok := want[name]; ok {
			return nil, fmt.Errorf("corpus directory %s holds %s, which gen did not write and would write over; move it away first", dir, name)
		}
	}
	next := genRecord{Format: genRecordFormat, Files: map[string][]string{}}
	for name, data := range want {
		next.Files[name] = []string{sha256Hex(data)}
	}
	if err := writeInto(dir, rec, next, order, want, ours, opt.Checkout); err != nil {
		return nil, err
	}
	return cases, nil
}

// dirLock is a held lock of a directory gen writes into.
type dirLock struct{ l *dirlock.Lock }

// lockDir takes dir's lock (internal/dirlock), so that two gens, or a gen
// and a train, never write into it at once: the second is refused at once,
// nothing written. Where flock(2) is missing, gen runs unlocked.
func lockDir(dir string) (dirLock, error) {
	l, err := dirlock.Acquire(dir)
	switch {
	case errors.Is(err, dirlock.ErrUnsupported):
		return dirLock{}, nil
	case errors.Is(err, dirlock.ErrHeld):
		return dirLock{}, fmt.Errorf("gen's directory %w; another modref writes into it: run gen again when it has finished, or choose another directory", err)
	case err != nil:
		return dirLock{}, err
	}
	return dirLock{l}, nil
}

// release gives the lock up.
func (d dirLock) release() {
	if d.l != nil {
		d.l.Release()
	}
}

// writeInto writes want's files (in order) into dir, removes ours that it
// does not write, and records what it wrote (unless checkout, whose files
// are gen's by construction). Everything is written inside dir:
//
//  1. the temporaries an earlier, killed gen recorded are removed (in a
//     checkout, every stale temporary of atomicfile's);
//  2. the record lists the old and the new content of every file and the
//     temporaries about to be created, so that a kill at any moment leaves
//     every file of gen's, and every temporary, known to the next gen;
//  3. every file is written and synced under its temporary name, and only
//     then are they all renamed into place (each case's NAME.npz before its
//     NAME.json), so that a failure while writing (a full disk) changes no
//     file, and a reader sees a mixture of old and new cases only for the
//     moment of the renames, each file whole;
//  4. the files gen wrote before and does not write now are removed, and
//     the record narrowed to what was written.
func writeInto(dir string, rec, next genRecord, order []string, want map[string][]byte, ours []string, checkout bool) error {
	removeLeftovers(dir, rec, checkout)
	tmps := make(map[string]string, len(order))
	both := genRecord{Format: genRecordFormat, Files: map[string][]string{}}
	for name, sums := range rec.Files {
		both.Files[name] = slices.Clone(sums)
	}
	for name, sums := range next.Files {
		for _, sum := range sums {
			if !slices.Contains(both.Files[name], sum) {
				both.Files[name] = append(both.Files[name], sum)
			}
		}
	}
	for _, name := range order {
		tmps[name] = filepath.Base(atomicfile.NewTempName(filepath.Join(dir, name)))
		both.Temporaries = append(both.Temporaries, tmps[name])
	}
	if !checkout {
		if err := putRecord(dir, &rec, both); err != nil {
			return err
		}
	}
	staged := make([]*atomicfile.Staged, 0, len(order))
	for _, name := range order {
		s, err := atomicfile.Stage(filepath.Join(dir, name), filepath.Join(dir, tmps[name]), want[name])
		if err != nil {
			for _, s := range staged {
				s.Abort()
			}
			return err
		}
		staged = append(staged, s)
	}
	for i, s := range staged {
		if err := s.Commit(); err != nil {
			for _, s := range staged[i+1:] {
				s.Abort()
			}
			return err
		}
	}
	for _, name := range ours {
		if _, ok := want[name]; ok {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("removing %s, which an earlier gen wrote: %w", filepath.Join(dir, name), err)
		}
	}
	if checkout {
		return nil
	}
	return putRecord(dir, &rec, next)
}

// removeLeftovers removes the temporary files that rec says a gen created
// in dir (a kill left them), and nothing else: a file named like a
// temporary that the record does not list may be a user's. In a checkout,
// whose files are gen's by construction, every stale temporary is removed.
func removeLeftovers(dir string, rec genRecord, checkout bool) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if name := e.Name(); keepOut(name, rec, checkout) && name != GenRecord && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// putRecord writes rec as dir's GenRecord, through the temporary name the
// record on disk (*prev) announced, or, when dir has no record yet, by
// creating it; rec announces the next one. *prev becomes rec.
func putRecord(dir string, prev *genRecord, rec genRecord) error {
	path := filepath.Join(dir, GenRecord)
	rec.Next = filepath.Base(atomicfile.NewTempName(path))
	raw, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	_, err = os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = createRecord(path, raw)
	case err == nil:
		tmp := atomicfile.NewTempName(path)
		if prev.Next != "" {
			tmp = filepath.Join(dir, prev.Next)
			os.Remove(tmp) // a kill's leftover, which the record on disk announced
		}
		var s *atomicfile.Staged
		if s, err = atomicfile.Stage(path, tmp, raw); err == nil {
			err = s.Commit()
		}
	}
	if err != nil {
		return fmt.Errorf("gen's record: %w", err)
	}
	*prev = rec
	return nil
}

// createRecord creates dir's first GenRecord at path, in one write: no
// temporary name is recorded yet through which to write it, and a kill
// leaves no record or the whole one.
func createRecord(path string, raw []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// keepOut reports whether an entry of a corpus directory is left out of
// the question whose it is: gen's record, and the temporary files a killed
// gen left that its record lists (writeInto removes them), or in a
// checkout every stale temporary of atomicfile's.
func keepOut(name string, rec genRecord, checkout bool) bool {
	return name == GenRecord || name == rec.Next || slices.Contains(rec.Temporaries, name) || checkout && atomicfile.IsStale(name)
}

// refuseOthers is WriteCorpus's error for a directory holding files gen did
// not write.
func refuseOthers(dir string, others []string) error {
	return fmt.Errorf("corpus directory %s holds %s, which gen did not write; gen replaces the directory's contents, so it leaves a directory holding other files alone: choose an empty or new directory, or pass --keep-others to write the cases beside them", dir, listNames(others))
}

// cannotBeGens reports, before the cases are generated, whether the entry e
// cannot be a file gen wrote: it is not regular, or its name is neither a
// case's file (names lists the cases) nor in the record.
func cannotBeGens(e fs.DirEntry, names []string, rec genRecord, checkout bool) bool {
	name := e.Name()
	if !e.Type().IsRegular() {
		return true
	}
	base, ok := strings.CutSuffix(name, ".json")
	if !ok {
		base, ok = strings.CutSuffix(name, ".npz")
	}
	return rec.Files[name] == nil && !(ok && (checkout || slices.Contains(names, base)))
}

// WriteGenerated writes one generated case (`modref gen --config`) into
// dir, which must exist, beside whatever else it holds: its two files are
// written as writeInto writes, and only over files gen wrote (GenRecord
// lists them with their content, or they hold exactly these bytes); any
// other file of those names is refused, nothing written. dir is locked
// while it is read and written (internal/dirlock): a second gen into it at
// that moment is refused, and the record keeps every case written.
func WriteGenerated(dir string, c *format.Case) error {
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lock.release()
	rec, err := readGenRecord(dir)
	if err != nil {
		return err
	}
	files, err := c.Files()
	if err != nil {
		return err
	}
	next := genRecord{Format: genRecordFormat, Files: map[string][]string{}}
	for name, sums := range rec.Files {
		next.Files[name] = slices.Clone(sums)
	}
	want := map[string][]byte{}
	var order []string
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		fi, err := os.Lstat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) || err == nil && !isGens(dir, fs.FileInfoToDirEntry(fi), rec, map[string][]byte{f.Name: f.Data}, false) {
			return fmt.Errorf("%s exists and gen did not write it; move it away, or choose another name or directory", path)
		}
		want[f.Name] = f.Data
		order = append(order, f.Name)
		next.Files[f.Name] = []string{sha256Hex(f.Data)}
	}
	return writeInto(dir, rec, next, order, want, nil, false)
}

// isGens reports whether the entry e of dir is a file gen wrote.
func isGens(dir string, e fs.DirEntry, rec genRecord, want map[string][]byte, checkout bool) bool {
	name := e.Name()
	if !e.Type().IsRegular() {
		return false
	}
	if checkout && (strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".npz")) {
		return true
	}
	data, ok := want[name]
	if !ok && rec.Files[name] == nil {
		return false
	}
	raw, err := readfile.Read(filepath.Join(dir, name), format.MaxFileBytes)
	if err != nil {
		return false
	}
	return (ok && bytes.Equal(raw, data)) || slices.Contains(rec.Files[name], sha256Hex(raw))
}

// readGenRecord reads dir's GenRecord; a directory without one has an
// empty record. The record must be a regular file of dir (not a link,
// through which gen would write into another directory's record), and the
// temporaries it lists names in dir of the form atomicfile gives them.
func readGenRecord(dir string) (genRecord, error) {
	path := filepath.Join(dir, GenRecord)
	rec := genRecord{Format: genRecordFormat, Files: map[string][]string{}}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err == nil && !fi.Mode().IsRegular() {
		return rec, fmt.Errorf("%s is %s, not a regular file: gen writes its record only as a file of its own directory; move it away", path, readfile.Kind(fi.Mode()))
	}
	raw, err := readfile.Read(path, maxGenRecordBytes)
	if err != nil {
		return rec, fmt.Errorf("gen's record: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	bad := dec.Decode(&rec) != nil || rec.Format != genRecordFormat || rec.Files == nil
	for _, name := range append(slices.Clone(rec.Temporaries), rec.Next) {
		bad = bad || name != "" && !atomicfile.IsTempName(name)
	}
	if bad {
		return rec, fmt.Errorf("%s is not a record modref gen wrote (want JSON with \"format\": %q); move it away", path, genRecordFormat)
	}
	return rec, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// listNames lists up to five names for a message, then how many more.
func listNames(names []string) string {
	const show = 5
	if len(names) <= show {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:show], ", "), len(names)-show)
}
