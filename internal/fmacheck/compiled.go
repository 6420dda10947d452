package fmacheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A Target is a build whose compiler fuses floating-point multiply-adds:
// its name and the environment that selects it.
type Target struct {
	Name string
	Env  []string
}

// FusingTargets are the builds on which the Go compiler fuses x*y + z
// unless the product is rounded explicitly: amd64 from GOAMD64=v3, and
// arm64, ppc64le, s390x and riscv64 always.
var FusingTargets = []Target{
	{"amd64 (GOAMD64=v3)", []string{"GOOS=linux", "GOARCH=amd64", "GOAMD64=v3"}},
	{"amd64 (GOAMD64=v4)", []string{"GOOS=linux", "GOARCH=amd64", "GOAMD64=v4"}},
	{"arm64", []string{"GOOS=linux", "GOARCH=arm64"}},
	{"ppc64le", []string{"GOOS=linux", "GOARCH=ppc64le"}},
	{"s390x", []string{"GOOS=linux", "GOARCH=s390x"}},
	{"riscv64", []string{"GOOS=linux", "GOARCH=riscv64"}},
}

// A Fusion is one fused multiply-add instruction the compiler emitted.
type Fusion struct {
	Target string
	// File and Line are the source position the compiler gives the
	// instruction: for inlined code, the innermost inlined line.
	File  string
	Line  int
	Instr string
	// Source is the text of that line, trimmed.
	Source string
}

// String returns the position, the instruction, the target and the line, as in
// "ref/sum.go:34: FMADDD (arm64): s.lo += math.FMA(a, b, -h)".
func (f Fusion) String() string {
	return fmt.Sprintf("%s:%d: %s (%s): %s", f.File, f.Line, f.Instr, f.Target, f.Source)
}

// asmLine matches a line of the compiler's -S listing: the instruction's
// offset, the source position in parentheses, and the mnemonic.
var asmLine = regexp.MustCompile(`^\s+0x[0-9a-f]+ \d+ \(([^()]+):(\d+)\)\s+([A-Z0-9.]+)`)

// fusedOp matches the scalar fused multiply-add mnemonics of the fusing
// targets' Go assemblers: VFMADD231SD and kin on amd64, FMADDD, FMSUBS,
// FNMADDD and kin on arm64 and riscv64, FMADD, FMSUBS, FNMSUB and kin on
// ppc64le and s390x.
var fusedOp = regexp.MustCompile(`^V?FN?M(ADD|SUB)(\d*S[SD]|[SD]|)$`)

// Compiled builds the packages patterns name, from the module in dir, for
// target, with the compiler's assembly listing (-S) for the module's own
// packages, and returns every fused multiply-add instruction in it except
// those on a line that calls math.FMA, which asks for one. The go command
// replays a cached compilation's listing, so a second call is fast.
func Compiled(dir string, target Target, patterns ...string) ([]Fusion, error) {
	module, err := goCommand(dir, nil, "list", "-m")
	if err != nil {
		return nil, err
	}
	args := append([]string{"build", "-o", os.DevNull, "-gcflags=" + strings.TrimSpace(string(module)) + "/...=-S"}, patterns...)
	listing, err := goCommand(dir, target.Env, args...)
	if err != nil {
		return nil, fmt.Errorf("fmacheck: building for %s: %w", target.Name, err)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fmacheck: %w", err)
	}
	seen := map[Fusion]bool{}
	var found []Fusion
	lines := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(listing))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		m := asmLine.FindSubmatch(sc.Bytes())
		if m == nil || !fusedOp.Match(m[3]) {
			continue
		}
		f := Fusion{Target: target.Name, File: string(m[1]), Instr: string(m[3])}
		f.Line, _ = strconv.Atoi(string(m[2]))
		if rel, err := filepath.Rel(root, f.File); err == nil && !strings.HasPrefix(rel, "..") {
			f.File = rel
		}
		src, ok := lines[f.File]
		if !ok {
			if b, err := os.ReadFile(filepath.Join(root, f.File)); err == nil {
				src = strings.Split(string(b), "\n")
			} else if b, err := os.ReadFile(f.File); err == nil {
				src = strings.Split(string(b), "\n")
			}
			lines[f.File] = src
		}
		if f.Line >= 1 && f.Line <= len(src) {
			f.Source = strings.TrimSpace(src[f.Line-1])
		}
		if strings.Contains(f.Source, "math.FMA(") || seen[f] {
			continue
		}
		seen[f] = true
		found = append(found, f)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fmacheck: reading the listing for %s: %w", target.Name, err)
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].File != found[j].File {
			return found[i].File < found[j].File
		}
		return found[i].Line < found[j].Line
	})
	return found, nil
}

// goCommand runs the go command in dir with env added to the environment,
// and returns what it wrote to its standard error and output together (the
// compiler's listing goes to standard error).
func goCommand(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := out
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail)
	}
	return out, nil
}
