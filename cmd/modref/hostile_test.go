package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/internal/race"
)

// The hostile-candidate regression tests (issue 16) run the built binary
// from a temporary directory outside the checkout, as CI runs it, with
// --dir pointing at the corpus; every one asserts the exit status, the
// named error and that no file changed.

var modrefBin string

// fakeBin is the program fakeExec runs as the candidate: this test binary
// (TestMain runs fakeCandidate when MODREF_FAKE_CANDIDATE is set), or,
// under -race, this package's tests built without the race detector.
var fakeBin = os.Args[0]

func TestMain(m *testing.M) {
	if os.Getenv("MODREF_LIMITED_LAUNCH") != "" {
		launchLimited()
	}
	if mode := os.Getenv("MODREF_FAKE_CANDIDATE"); mode != "" {
		os.Exit(fakeCandidate(mode, os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "modref-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	modrefBin = filepath.Join(dir, "modref")
	if out, err := exec.Command("go", "build", "-o", modrefBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building modref: %v\n%s", err, out)
		os.Exit(1)
	}
	if race.Enabled {
		// The fake candidate plays the user's implementation, which the
		// race detector is not here to check (modrefBin is built without
		// it too): it generates every case again with golden, which under
		// -race on a loaded 2-core machine made cmd/modref's TestFuzz*
		// take 431 s (issue 37). Built without -race it runs as it does
		// in go test ./cmd/modref.
		fakeBin = filepath.Join(dir, "fake")
		if out, err := exec.Command("go", "test", "-c", "-o", fakeBin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the fake candidate: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// skipRaceShort skips t under go test -race -short, saying why: t is one
// of cmd/modref's heaviest tests, and its work runs where the race
// detector does not look. modrefBin and the fake candidate are built
// without it (TestMain), so a test that runs them checks under -race what
// it checks without, while its wall time grows with the load: cmd/modref's
// tests under -race took 1184 s at a load average of 9-26 (issue 37),
// past go test's 10-minute timeout, and with ten of these skipped still
// 605 s at a load of 17-31. go test ./cmd/modref, which .ci/run
// runs, runs them all; so does -race without -short.
func skipRaceShort(t *testing.T, why string) {
	t.Helper()
	race.SkipShort(t, why+"; go test ./cmd/modref runs it")
}

// absCorpus is the committed corpus as an absolute path.
func absCorpus(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(corpus)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runBin runs modref in a fresh temporary working directory with a time
// limit (a hang fails the test rather than the run).
func runBin(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, modrefBin, args...)
	cmd.Dir = t.TempDir()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("modref %v did not finish within the time limit", args)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// tree hashes every file under the given paths (following none of their
// links), with its mode, so that a test can show that nothing changed.
func tree(t *testing.T, roots ...string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return nil
			}
			v := fi.Mode().String()
			if fi.Mode().IsRegular() {
				raw, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				v += fmt.Sprintf(" %x", sha256.Sum256(raw))
			}
			out[p] = v
			return nil
		})
	}
	return out
}

func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed: %q, now %q", p, v, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s was created", p)
		}
	}
}

// npyBytes returns an .npy entry (version 1.0 header padded to 64 bytes).
func npyBytes(descr string, shape []int, data []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	return append(append(out, h...), data...)
}

// member is one zip member of a crafted archive.
type member struct {
	name string
	data []byte
	// crc, when set, replaces the member's true CRC-32; size, when set, its
	// declared uncompressed size (stored members only).
	crc  *uint32
	size uint64
	// deflate compresses the member.
	deflate bool
}

// craft returns a zip archive of the members.
func craft(t *testing.T, ms []member) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range ms {
		if m.deflate {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: m.name, Method: zip.Deflate})
			if err != nil {
				t.Fatal(err)
			}
			w.Write(m.data)
			continue
		}
		h := &zip.FileHeader{Name: m.name, Method: zip.Store, CRC32: crc32.ChecksumIEEE(m.data),
			CompressedSize64: uint64(len(m.data)), UncompressedSize64: uint64(len(m.data))}
		if m.crc != nil {
			h.CRC32 = *m.crc
		}
		if m.size != 0 {
			h.UncompressedSize64 = m.size
		}
		w, err := zw.CreateRaw(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(m.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// caseMembers returns layer-paper's expected arrays as stored .npy members,
// in name order, with edit applied to the arrays first.
func caseMembers(t *testing.T, edit func(map[string]*format.Array)) []member {
	t.Helper()
	c, err := format.Load(corpus, "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	cand := make(map[string]*format.Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			a := c.Arrays[info.Name]
			cand[format.CandidateName(info.Name)] = &format.Array{Shape: a.Shape, F: append([]float64(nil), a.F...), I: append([]int64(nil), a.I...), DType: a.DType}
		}
	}
	if edit != nil {
		edit(cand)
	}
	names := make([]string, 0, len(cand))
	for n := range cand {
		names = append(names, n)
	}
	sort.Strings(names)
	var ms []member
	for _, n := range names {
		a := cand[n]
		var data []byte
		for _, v := range a.F {
			data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
		}
		for _, v := range a.I {
			data = binary.LittleEndian.AppendUint64(data, uint64(v))
		}
		if a.I == nil && a.F == nil {
			continue
		}
		ms = append(ms, member{name: n + ".npy", data: npyBytes(a.DType, a.Shape, data)})
	}
	return ms
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectRefused runs modref with args and asserts exit 2, every wanted text
// on stderr, no stack trace and no file changed under watch.
func expectRefused(t *testing.T, args []string, want []string, watch ...string) {
	t.Helper()
	before := tree(t, watch...)
	code, out, errOut := runBin(t, args...)
	if code != 2 {
		t.Errorf("modref %v: exit %d, want 2\nstdout %s\nstderr %s", args, code, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("modref %v: stderr %q does not name %q", args, errOut, w)
		}
	}
	if strings.Contains(errOut, "goroutine ") || strings.Contains(errOut, "panic") {
		t.Errorf("modref %v: a panic on stderr:\n%s", args, errOut)
	}
	sameTree(t, before, tree(t, watch...))
}

// checkAndDiagnose runs the same refusal through check and diagnose.
func checkAndDiagnose(t *testing.T, cand string, want ...string) {
	t.Helper()
	dir := absCorpus(t)
	expectRefused(t, []string{"check", "--dir", dir, "--candidate", cand, "layer-paper"}, want, dir, filepath.Dir(cand))
	expectRefused(t, []string{"diagnose", "--dir", dir, "--candidate", cand, "layer-paper"}, want, dir, filepath.Dir(cand))
}

// Class 1: a selected position at or near 2^63 (or below −1).
func TestHostileSelectedOutOfRange(t *testing.T) {
	for _, v := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, -2, 8} {
		ms := caseMembers(t, func(m map[string]*format.Array) { m["selected"].I[1] = v })
		cand := writeFile(t, t.TempDir(), "c.npz", craft(t, ms))
		checkAndDiagnose(t, cand, "invalid value", `"selected"`, fmt.Sprint(v), "[0 1]")
	}
}

// Class 2: data one element shorter (or longer) than the header declares.
func TestHostileDataLength(t *testing.T) {
	for _, delta := range []int{-8, -1, 8} {
		ms := caseMembers(t, nil)
		for i := range ms {
			if ms[i].name == "weights.npy" {
				ms[i].data = ms[i].data[:len(ms[i].data)+min(delta, 0)]
				if delta > 0 {
					ms[i].data = append(ms[i].data, make([]byte, delta)...)
				}
			}
		}
		cand := writeFile(t, t.TempDir(), "c.npz", craft(t, ms))
		checkAndDiagnose(t, cand, "data length does not match the header", `"weights"`)
	}
}

// Class 3: one low bit of a stored value flipped after the archive was
// written.
func TestHostileBadCRC(t *testing.T) {
	raw := craft(t, caseMembers(t, nil))
	c, err := format.Load(corpus, "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	v := binary.LittleEndian.AppendUint64(nil, math.Float64bits(c.Arrays["expected.out"].F[0]))
	at := bytes.Index(raw, v)
	if at < 0 {
		t.Fatal("out[0] not found in the stored archive")
	}
	raw[at] ^= 1
	cand := writeFile(t, t.TempDir(), "c.npz", raw)
	checkAndDiagnose(t, cand, "bad CRC-32", `"out"`)
	// A stored CRC-32 of 0 (which archive/zip does not check), and a member
	// the case does not judge.
	zero, wrong := uint32(0), uint32(12345)
	ms := caseMembers(t, nil)
	ms[3].crc = &zero
	checkAndDiagnose(t, writeFile(t, t.TempDir(), "c.npz", craft(t, ms)), "bad CRC-32", ms[3].name[:len(ms[3].name)-4])
	for _, crc := range []*uint32{&zero, &wrong} {
		ms := append(caseMembers(t, nil), member{name: "extra.npy", data: npyBytes("<f8", []int{1}, make([]byte, 8)), crc: crc})
		checkAndDiagnose(t, writeFile(t, t.TempDir(), "c.npz", craft(t, ms)), "bad CRC-32", `"extra"`)
	}
}

// Class 4: memory from tiny files: arrays declaring 1 GiB, a declared size
// larger than the member, a deflate bomb.
func TestHostileMemory(t *testing.T) {
	skipRaceShort(t, "it deflates 256 MiB of crafted bombs in the test process, slowed by the race detector, to test modrefBin, not")
	dir := t.TempDir()
	// 40 judged arrays declaring 1 GiB each.
	var huge []member
	for _, m := range caseMembers(t, nil) {
		huge = append(huge, member{name: m.name, data: npyBytes("<f8", []int{1 << 27}, nil)})
	}
	checkAndDiagnose(t, writeFile(t, dir, "judged.npz", craft(t, huge)), "too large", "more than the", "case layer-paper allows")
	declared := caseMembers(t, nil)
	declared[1].size = 1 << 30
	checkAndDiagnose(t, writeFile(t, dir, "declared.npz", craft(t, declared)), "data length does not match the header")
	bomb := caseMembers(t, nil)
	bomb = append(bomb, member{name: "bomb.npy", data: npyBytes("<f8", []int{16 << 20}, make([]byte, 128<<20)), deflate: true})
	checkAndDiagnose(t, writeFile(t, dir, "bomb.npz", craft(t, bomb)), "too large", `"bomb"`)
	judgedBomb := caseMembers(t, nil)
	for i := range judgedBomb {
		if judgedBomb[i].name == "out.npy" {
			judgedBomb[i] = member{name: "out.npy", data: npyBytes("<f8", []int{2, 8, 8}, make([]byte, 128<<20)), deflate: true}
		}
	}
	checkAndDiagnose(t, writeFile(t, dir, "judgedbomb.npz", craft(t, judgedBomb)), "data length does not match the header", `"out"`)
}

// Class 5: a device, a link to one, a FIFO, a directory named CASE.npz.
func TestHostileSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	corpusDir := absCorpus(t)
	expectRefused(t, []string{"check", "--dir", corpusDir, "--candidate", "/dev/zero", "layer-paper"}, []string{"not a regular file", "character device"}, corpusDir)
	link := filepath.Join(dir, "layer-paper.npz")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	checkAndDiagnose(t, link, "not a regular file")
	expectRefused(t, []string{"check", "--dir", corpusDir, "--candidate", dir, "layer-paper"}, []string{"not a regular file"}, corpusDir, dir)
	fifo := filepath.Join(t.TempDir(), "fifo.npz")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	checkAndDiagnose(t, fifo, "not a regular file", "a FIFO")
	sub := t.TempDir()
	if err := os.Mkdir(filepath.Join(sub, "layer-paper.npz"), 0o755); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, []string{"check", "--dir", corpusDir, "--candidate", sub, "layer-paper"}, []string{"not a regular file", "a directory"}, corpusDir, sub)
	// A corpus whose manifest is a link to /dev/zero.
	bad := copyCase(t, "layer-paper")
	os.Remove(filepath.Join(bad, "layer-paper.json"))
	if err := os.Symlink("/dev/zero", filepath.Join(bad, "layer-paper.json")); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, []string{"check", "--dir", bad, "layer-paper"}, []string{"layer-paper.json", "not a regular file"}, bad)
}

// copyCase copies one case of the corpus into a new directory.
func copyCase(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, ext := range []string{".json", ".npz"} {
		raw, err := os.ReadFile(filepath.Join(corpus, name+ext))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, name+ext, raw)
	}
	return dir
}

// Class 6: an empty --candidate is a usage error; the table and JSON say
// what was checked.
func TestHostileEmptyCandidate(t *testing.T) {
	dir := absCorpus(t)
	expectRefused(t, []string{"check", "--dir", dir, "--candidate", "", "layer-paper"}, []string{"--candidate is empty"}, dir)
	expectRefused(t, []string{"check", "--dir", dir, "--candidate=", "layer-paper"}, []string{"--candidate is empty"}, dir)
	expectRefused(t, []string{"diagnose", "--dir", dir, "--candidate", "", "layer-paper"}, []string{"--candidate is empty"}, dir)
	cand := writeFile(t, t.TempDir(), "layer-paper.npz", craft(t, caseMembers(t, nil)))
	code, out, errOut := runBin(t, "check", "--dir", dir, "--candidate", cand, "layer-paper")
	if code != 0 || !strings.Contains(out, "candidate: "+cand) {
		t.Errorf("table: exit %d, want 0 and a line naming the candidate\n%s%s", code, out, errOut)
	}
	code, out, errOut = runBin(t, "check", "--dir", dir, "--candidate", cand, "--json", "layer-paper")
	if code != 0 || !strings.Contains(out, fmt.Sprintf(`"candidate": %q`, cand)) {
		t.Errorf("JSON: exit %d, want 0 and the candidate named\n%s%s", code, out, errOut)
	}
	code, out, errOut = runBin(t, "check", "--dir", dir, "--json", "layer-paper")
	if code != 0 || !strings.Contains(out, `"candidate": "modref's mod/`) {
		t.Errorf("JSON without a candidate: exit %d, want 0 and modref's implementation named\n%s%s", code, out, errOut)
	}
}

// Class 7: a manifest whose sizes disagree with its arrays.
func TestHostileManifest(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{`"seq_len": 8`, `"seq_len": 16`, "want batch 2 × seq_len 16"},
		{`"batch": 2`, `"batch": 3`, "want batch 3"},
	} {
		dir := copyCase(t, "layer-paper")
		p := filepath.Join(dir, "layer-paper.json")
		raw, _ := os.ReadFile(p)
		edited := strings.Replace(string(raw), c.from, c.to, 1)
		if edited == string(raw) {
			t.Fatalf("layer-paper.json has no %s", c.from)
		}
		writeFile(t, dir, "layer-paper.json", []byte(edited))
		cand := writeFile(t, t.TempDir(), "c.npz", craft(t, caseMembers(t, func(m map[string]*format.Array) { m["selected"].I[0] = 7 })))
		want := []string{"disagrees with its arrays", c.want}
		expectRefused(t, []string{"check", "--dir", dir, "--candidate", cand, "layer-paper"}, want, dir, filepath.Dir(cand))
		expectRefused(t, []string{"diagnose", "--dir", dir, "--candidate", cand, "layer-paper"}, want, dir, filepath.Dir(cand))
		expectRefused(t, []string{"check", "--dir", dir, "layer-paper"}, want, dir)
	}
}

// Class 8: the JUnit report is written atomically, after the table, never
// over an input; gen swaps in a complete directory with ordinary modes.
func TestHostileJUnit(t *testing.T) {
	dir := absCorpus(t)
	candDir := t.TempDir()
	cand := writeFile(t, candDir, "layer-paper.npz", craft(t, caseMembers(t, nil)))
	expectRefused(t, []string{"check", "--dir", dir, "--candidate", cand, "--junit", cand, "layer-paper"}, []string{"refusing to overwrite"}, dir, candDir)
	expectRefused(t, []string{"check", "--dir", dir, "--candidate", candDir, "--junit", cand, "layer-paper"}, []string{"refusing to overwrite"}, dir, candDir)
	expectRefused(t, []string{"check", "--dir", dir, "--candidate", cand, "--junit", filepath.Join(dir, "layer-paper.json"), "layer-paper"}, []string{"refusing to overwrite"}, dir, candDir)
	// A report path in no directory is refused before anything is judged.
	expectRefused(t, []string{"check", "--dir", dir, "--candidate", cand, "--junit", filepath.Join(cand, "report.xml"), "layer-paper"}, []string{"--junit", "not a directory"}, dir, candDir)
	// An existing report is replaced whole, keeping its mode, with no
	// temporary file left; a new one has the ordinary mode.
	repDir := t.TempDir()
	report := writeFile(t, repDir, "report.xml", []byte("old"))
	os.Chmod(report, 0o600)
	fresh := filepath.Join(repDir, "new.xml")
	for _, out := range []string{report, fresh} {
		cmd := exec.Command("sh", "-c", `umask 022; exec "$0" "$@"`, modrefBin, "check", "--dir", dir, "--candidate", cand, "--junit", out, "layer-paper")
		cmd.Dir = t.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	ents, _ := os.ReadDir(repDir)
	if len(ents) != 2 {
		t.Errorf("report directory holds %d entries, want report.xml and new.xml", len(ents))
	}
	for p, mode := range map[string]os.FileMode{report: 0o600, fresh: 0o644} {
		fi, _ := os.Stat(p)
		raw, _ := os.ReadFile(p)
		if fi.Mode().Perm() != mode || !bytes.Contains(raw, []byte("<testsuite")) {
			t.Errorf("%s: mode %v, content %.40q; want %v and a test suite", p, fi.Mode(), raw, mode)
		}
	}
}

// gen (class 8): the files' modes follow the umask, the directory keeps its
// own; gen writes nothing beside the directory, and leaves a temporary
// directory an older modref's killed run left there alone (it cannot tell
// it from a user's); a SIGTERM leaves no temporary files and the corpus
// whole; a directory holding other files is refused.
func TestHostileGen(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "corpus")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o751)
	stale := filepath.Join(parent, ".corpus.modref-tmp-2147483646-abcdef")
	os.Mkdir(stale, 0o700)
	cmd := exec.Command("sh", "-c", `umask 027; exec "$0" "$@"`, modrefBin, "gen", "-dir", dir)
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 2 || ents[0].Name() != filepath.Base(stale) || ents[1].Name() != "corpus" {
		t.Errorf("beside the corpus after gen: %v, want only corpus and the old temporary directory, untouched", ents)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o751 {
		t.Errorf("corpus directory mode %v, want its own 0751 kept", fi.Mode())
	}
	files, _ := os.ReadDir(dir)
	files = slices.DeleteFunc(files, func(e os.DirEntry) bool { return e.Name() == golden.GenRecord })
	for _, f := range files {
		fi, _ := f.Info()
		if fi.Mode().Perm() != 0o640 {
			t.Errorf("%s mode %v, want 0640 under umask 027", f.Name(), fi.Mode())
		}
	}
	names, err := golden.Embedded().List()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2*len(names) {
		t.Errorf("gen wrote %d files, want %d (NAME.json and NAME.npz for each of the %d cases)", len(files), 2*len(names), len(names))
	}
	// Terminated at several moments, gen leaves the old or the new corpus,
	// whole, and no temporary file.
	want := tree(t, dir)
	for _, after := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second} {
		cmd := exec.Command(modrefBin, "gen", "-dir", dir)
		cmd.Dir = t.TempDir()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		ents, _ := os.ReadDir(parent)
		if len(ents) != 2 {
			t.Errorf("SIGTERM after %v left %v beside the corpus", after, ents)
		}
		got := tree(t, dir)
		if len(got) != len(want) {
			t.Errorf("SIGTERM after %v: the corpus holds %d entries, want %d", after, len(got), len(want))
		}
	}
	writeFile(t, dir, "notes.txt", []byte("mine"))
	expectRefused(t, []string{"gen", "-dir", dir}, []string{"notes.txt", "gen did not write"}, parent)
}

// Class 9: an archive of 200,000 members is refused before archive/zip
// reads its directory.
func TestHostileManyMembers(t *testing.T) {
	skipRaceShort(t, "it zips 200,000 members in the test process, slowed by the race detector, to test modrefBin, not (32 s at a load of 17-31)")
	ms := make([]member, 200000)
	for i := range ms {
		ms[i] = member{name: fmt.Sprintf("m%d.npy", i)}
	}
	cand := writeFile(t, t.TempDir(), "c.npz", craft(t, ms))
	checkAndDiagnose(t, cand, "too large", "200000 members")
	// Members within the count but a central directory over its bound.
	long := make([]member, 4000)
	for i := range long {
		long[i] = member{name: fmt.Sprintf("%0300d.npy", i)}
	}
	cand = writeFile(t, t.TempDir(), "c.npz", craft(t, long))
	checkAndDiagnose(t, cand, "too large", "central directory")
}

// Class 10: misleading messages made precise.
func TestHostileMessages(t *testing.T) {
	ms := caseMembers(t, nil)
	ms[0].data = append([]byte("\x93NUMPY\x01\x00\x10\x00{'descr': <f8}  \n"), ms[0].data[64:]...)
	checkAndDiagnose(t, writeFile(t, t.TempDir(), "c.npz", craft(t, ms)), "invalid .npy entry", "want a quoted string")
	ints := caseMembers(t, func(m map[string]*format.Array) {
		a := m["out"]
		a.I, a.DType = make([]int64, len(a.F)), "<i8"
		a.F = nil
	})
	checkAndDiagnose(t, writeFile(t, t.TempDir(), "c.npz", craft(t, ints)), `"out" has dtype <i8, want floating point`)
}

// A verdict with an infinite gap (a different number of selected tokens)
// or an overflowing difference is still valid JSON.
func TestHostileJSONInfinity(t *testing.T) {
	dir := absCorpus(t)
	ms := caseMembers(t, func(m map[string]*format.Array) {
		s := m["selected"]
		wider := make([]int64, 0, len(s.I)+s.Shape[0])
		for b := range s.Shape[0] {
			row := s.I[b*s.Shape[1] : (b+1)*s.Shape[1]]
			wider = append(append(wider, row...), -1)
		}
		s.I, s.Shape = wider, []int{s.Shape[0], s.Shape[1] + 1}
		// Row 0 routes one token more than the oracle: no flip between two
		// tokens, so the gap is infinite.
		in := make(map[int64]bool)
		for _, p := range wider[:s.Shape[1]-1] {
			in[p] = true
		}
		extra := int64(0)
		for in[extra] {
			extra++
		}
		wider[s.Shape[1]-1] = extra
		m["out"].F[0] = math.MaxFloat64
		m["weights"].F[0] = -math.MaxFloat64
	})
	cand := writeFile(t, t.TempDir(), "c.npz", craft(t, ms))
	code, out, errOut := runBin(t, "check", "--dir", dir, "--candidate", cand, "--json", "layer-paper")
	var v []map[string]any
	if code != 1 || json.Unmarshal([]byte(out), &v) != nil || !strings.Contains(out, `"inf"`) {
		t.Errorf("exit %d, want 1 with valid JSON holding \"inf\"\n%s%s", code, out, errOut)
	}
}

// maxRSSBytes is the peak resident memory modref check may reach on the
// worst crafted candidates. Measured here (after the corpus was embedded in
// the binary): 13–14 MB on each of them, 19 MB for modref's own check of
// the whole corpus (idle machine, 2026-11-22); the reader's bounds
// (docs/golden-format.md) keep a hostile file below this figure.
const maxRSSBytes = 32 << 20

// TestHostileMemoryBound runs check on the worst crafted candidates in a
// child process whose address space is capped (setrlimit RLIMIT_AS, 2 GiB:
// an allocation the size the files declare fails, and the child dies), and
// asserts the exit status and that the peak RSS (getrusage's maxrss) stays
// under maxRSSBytes. The child is started by a fresh launcher process (this
// test binary, see launchLimited): Linux carries the maximum RSS across
// fork and exec, so a child of the test process itself would report the
// test's own memory.
func TestHostileMemoryBound(t *testing.T) {
	skipRaceShort(t, "it deflates 312 MiB of crafted bombs and zips 200,000 members in the test process, slowed by the race detector (252 s at a load of 10-12), to test modrefBin, not")
	dir := absCorpus(t)
	cands := t.TempDir()
	var huge, hugeExtra []member
	for _, m := range caseMembers(t, nil) {
		huge = append(huge, member{name: m.name, data: npyBytes("<f8", []int{1 << 27}, nil)})
	}
	hugeExtra = caseMembers(t, nil)
	for i := range 40 {
		hugeExtra = append(hugeExtra, member{name: fmt.Sprintf("extra%d.npy", i), data: npyBytes("<f8", []int{1 << 27}, nil)})
	}
	bomb := append(caseMembers(t, nil), member{name: "bomb.npy", data: npyBytes("<f8", []int{7 << 20}, make([]byte, 56<<20)), deflate: true})
	judgedBomb := caseMembers(t, nil)
	for i := range judgedBomb {
		if judgedBomb[i].name == "out.npy" {
			judgedBomb[i] = member{name: "out.npy", data: npyBytes("<f8", []int{2, 8, 8}, make([]byte, 256<<20)), deflate: true}
		}
	}
	many := make([]member, 200000)
	for i := range many {
		many[i] = member{name: fmt.Sprintf("m%d.npy", i)}
	}
	for _, c := range []struct {
		name string
		ms   []member
		code int
	}{
		{"judged-1gib-each.npz", huge, 2},
		{"unjudged-1gib-each.npz", hugeExtra, 0},
		{"unjudged-bomb.npz", bomb, 0},
		{"judged-bomb.npz", judgedBomb, 2},
		{"many-members.npz", many, 2},
	} {
		p := writeFile(t, cands, c.name, craft(t, c.ms))
		cmd := exec.Command(os.Args[0], "-test.run=^$", "--", modrefBin, "check", "--dir", dir, "--candidate", p, "layer-paper")
		cmd.Env = append(os.Environ(), "MODREF_LIMITED_LAUNCH=1")
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var code int
		var rss int64
		if _, serr := fmt.Sscanf(string(out[bytes.LastIndex(out, []byte("\nlaunched:"))+1:]), "launched: exit %d, maxrss %d", &code, &rss); err != nil || serr != nil {
			t.Fatalf("%s: launcher: %v %v\n%s", c.name, err, serr, out)
		}
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, code, c.code, out)
		}
		t.Logf("%s: exit %d, peak RSS %.1f MB", c.name, code, float64(rss)/1e6)
		if rss > maxRSSBytes {
			t.Errorf("%s: peak RSS %d MB, over the bound of %d MB", c.name, rss>>20, maxRSSBytes>>20)
		}
	}
}

// launchLimited is the launcher of TestHostileMemoryBound: it caps the
// address space of itself and its children at 2 GiB, runs the command
// after "--", and prints its exit status and peak RSS in bytes.
func launchLimited() {
	args := os.Args
	for len(args) > 0 && args[0] != "--" {
		args = args[1:]
	}
	if len(args) < 2 {
		fmt.Println("launched: no command")
		os.Exit(1)
	}
	lim := &syscall.Rlimit{Cur: 2 << 30, Max: 2 << 30}
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, lim); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(1)
	}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Println("launched: did not start")
		os.Exit(1)
	}
	fmt.Printf("\nlaunched: exit %d, maxrss %d\n", cmd.ProcessState.ExitCode(), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss*1024)
	os.Exit(0)
}

// A corpus manifest listing arrays too large to allocate (the product of
// its dimensions overflowing int, too) is refused before its .npz is read.
func TestHostileManifestSizes(t *testing.T) {
	for _, shape := range []string{"[1073741824]", "[4294967296, 4294967296]", "[3037000500, 3037000500]"} {
		dir := copyCase(t, "layer-paper")
		p := filepath.Join(dir, "layer-paper.json")
		raw, _ := os.ReadFile(p)
		at := strings.Index(string(raw), `"name": "input.x"`)
		sh := strings.Index(string(raw)[at:], `"shape": [`) + at + len(`"shape": `)
		end := strings.Index(string(raw)[sh:], "]") + sh + 1
		writeFile(t, dir, "layer-paper.json", []byte(string(raw[:sh])+shape+string(raw[end:])))
		expectRefused(t, []string{"check", "--dir", dir, "layer-paper"}, []string{"layer-paper.json", "too large", "536870912 values"}, dir)
	}
}
