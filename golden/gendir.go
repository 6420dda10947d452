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
// two while a --keep-others write is under way, one otherwise.
type genRecord struct {
	Format string              `json:"format"`
	Files  map[string][]string `json:"files"`
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
}

// WriteCorpus generates every case and writes it into dir, which must
// exist, removing only files that gen wrote: those its GenRecord lists with
// the content it wrote, those that hold exactly what gen writes now under
// their name, and, with opt.Checkout, every NAME.json and NAME.npz. A
// directory holding anything else is refused, nothing written, unless
// opt.KeepOthers. Without other files the directory is replaced whole
// (internal/atomicfile, keeping its mode), so that a failure or a kill
// leaves the old corpus or the new one, never a mixture.
func WriteCorpus(dir string, opt WriteOptions) ([]*format.Case, error) {
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
			if !keepOut(e.Name()) && cannotBeGens(e, names, rec, opt.Checkout) {
				others = append(others, e.Name())
			}
		}
		if len(others) > 0 {
			return nil, refuseOthers(dir, others)
		}
	}
	cases, err := Generate()
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
		case keepOut(name):
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
	if len(others) == 0 {
		err = atomicfile.ReplaceDir(dir, func(tmp string) error {
			for _, name := range order {
				if err := atomicfile.WriteFile(filepath.Join(tmp, name), want[name]); err != nil {
					return err
				}
			}
			if opt.Checkout {
				return nil // the checkout's corpus is gen's by construction
			}
			return writeGenRecord(tmp, next)
		})
	} else {
		err = writeBeside(dir, rec, next, order, want, ours)
	}
	if err != nil {
		return nil, err
	}
	return cases, nil
}

// writeBeside writes the corpus into dir file by file, beside files gen did
// not write. The record first lists the old and the new content of every
// file, so that a kill at any moment leaves each of gen's files known to
// the next gen; the files gen wrote before and does not write now are then
// removed, and the record is narrowed to what was written.
func writeBeside(dir string, rec, next genRecord, order []string, want map[string][]byte, ours []string) error {
	both := genRecord{Format: genRecordFormat, Files: map[string][]string{}}
	for name, sums := range rec.Files {
		both.Files[name] = slices.Clone(sums)
	}
	for name, sums := range next.Files {
		both.Files[name] = append(both.Files[name], sums...)
	}
	if err := writeGenRecord(dir, both); err != nil {
		return err
	}
	for _, name := range order {
		if err := atomicfile.WriteFile(filepath.Join(dir, name), want[name]); err != nil {
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
	return writeGenRecord(dir, next)
}

// keepOut reports whether an entry of a corpus directory is left out of
// the question whose it is: gen's record, and the temporary files a killed
// modref left (atomicfile removes them).
func keepOut(name string) bool {
	return name == GenRecord || atomicfile.IsStale(name)
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
// written atomically, and only over files gen wrote (GenRecord lists them
// with their content, or they hold exactly these bytes); any other file of
// those names is refused, nothing written. The record gains the case's
// files, first with their old and new contents, so that a kill at any
// moment leaves both files known to the next gen.
func WriteGenerated(dir string, c *format.Case) error {
	rec, err := readGenRecord(dir)
	if err != nil {
		return err
	}
	files, err := c.Files()
	if err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || !isGens(dir, fs.FileInfoToDirEntry(fi), rec, map[string][]byte{f.Name: f.Data}, false) {
			return fmt.Errorf("%s exists and gen did not write it; move it away, or choose another name or directory", path)
		}
	}
	for _, f := range files {
		rec.Files[f.Name] = append(rec.Files[f.Name], sha256Hex(f.Data))
	}
	if err := writeGenRecord(dir, rec); err != nil {
		return err
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.Name), f.Data); err != nil {
			return err
		}
		rec.Files[f.Name] = []string{sha256Hex(f.Data)}
	}
	return writeGenRecord(dir, rec)
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
// empty record.
func readGenRecord(dir string) (genRecord, error) {
	path := filepath.Join(dir, GenRecord)
	rec := genRecord{Format: genRecordFormat, Files: map[string][]string{}}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	raw, err := readfile.Read(path, maxGenRecordBytes)
	if err != nil {
		return rec, fmt.Errorf("gen's record: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil || rec.Format != genRecordFormat {
		return rec, fmt.Errorf("%s is not a record modref gen wrote (want JSON with \"format\": %q); move it away", path, genRecordFormat)
	}
	return rec, nil
}

// writeGenRecord writes rec as dir's GenRecord.
func writeGenRecord(dir string, rec genRecord) error {
	raw, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, GenRecord), append(raw, '\n'))
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
