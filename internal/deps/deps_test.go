package deps

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/modref/modref"

// layers is the module drawn in docs/design.md ("Dependencies"), from the
// bottom up: a package may import only packages of layers below its own
// (TestRuleRunsDown checks allowed against it, so that an import that runs
// up cannot be allowed). internal/ holds only leaf utilities, which import
// the standard library, golang.org/x/sys and each other; the adapters that
// join mod to golden and ref sit above both, under mod/.
var layers = [][]string{
	// Leaves: the vocabulary and the utilities that know no model.
	{"spec", "internal/readfile", "internal/lowp", "internal/benchcpu",
		"internal/candidate", "internal/deps", "internal/race", "bench/peak", "internal/elem", "ref/internal/prod",
		"autograd/internal/kernel"},
	{"internal/atomicfile", "autograd", "internal/fmacheck"},
	{"internal/dirlock", "ref", "nn", "golden/format"},
	// The truth and the fast path, side by side and blind to each other.
	{"golden/oracle", "mod"},
	{"golden/judge"},
	{"golden/diagnose"},
	{"golden"},
	{"golden/fuzzcase"},
	// Adapters between mod and golden/ref, and mod's training.
	{"mod/modcase", "mod/train"},
	// Programs and the packages that compose everything.
	{"mod/modcase/catchtable", "mod/train/plot", "fuzz"},
	{"mod/train/experiment", "cmd/modref"},
}

// allowed is the import rule of docs/design.md: for each package of the
// module (path relative to the module), the module packages its non-test
// code may import. spec ← ref; spec ← autograd ← nn ← mod; ref ← golden;
// internal/readfile (bounded reads of regular files) ← internal/atomicfile
// (atomic writes of regular files) ← golden, mod/train, mod/train/plot, the
// CLI; internal/dirlock (the run directory's lock) ← the CLI;
// internal/candidate (runs a user's program) ← the CLI; spec, golden ←
// golden/fuzzcase (modref fuzz's draws and shrinking) ← the CLI;
// mod/modcase (mod run on golden's cases), mod/train (golden for its .npz
// reader only), the CLI and the fuzz targets on top. ref is the truth the
// fast path is checked against and mod is the fast path: neither imports
// the other.
var allowed = map[string][]string{
	"spec":                     {},
	"bench/peak":               {},
	"ref":                      {"spec", "internal/elem", "ref/internal/prod"},
	"internal/elem":            {},
	"ref/internal/prod":        {},
	"autograd":                 {"spec", "autograd/internal/kernel", "internal/elem"},
	"autograd/internal/kernel": {},
	"nn":                       {"spec", "autograd", "internal/elem"},
	"mod":                      {"spec", "autograd", "nn", "internal/elem"},
	"golden/format":            {"spec", "internal/atomicfile", "internal/readfile", "internal/lowp"},
	"golden/oracle":            {"spec", "ref", "golden/format"},
	"golden/judge":             {"spec", "ref", "golden/format", "golden/oracle"},
	"golden/diagnose":          {"spec", "ref", "golden/format", "golden/oracle", "golden/judge"},
	"golden":                   {"spec", "internal/elem", "ref", "golden/format", "golden/oracle", "golden/judge", "golden/diagnose", "internal/atomicfile", "internal/readfile", "internal/dirlock", "internal/lowp"},
	"internal/lowp":            {},
	"internal/readfile":        {},
	"internal/atomicfile":      {"internal/readfile"},
	"internal/dirlock":         {"internal/readfile", "internal/atomicfile"},
	"internal/fmacheck":        {"internal/race"},
	"internal/benchcpu":        {},
	"internal/deps":            {},
	"internal/candidate":       {},
	"internal/race":            {},
	"golden/fuzzcase":          {"spec", "internal/elem", "golden", "golden/format"},
	"mod/modcase":              {"spec", "autograd", "nn", "mod", "ref", "golden", "golden/format", "golden/diagnose", "golden/judge", "golden/oracle", "internal/lowp"},
	"mod/modcase/catchtable":   {"golden", "golden/format", "golden/diagnose", "golden/judge", "mod/modcase"},
	"mod/train":                {"spec", "internal/elem", "autograd", "nn", "mod", "golden/format", "internal/atomicfile", "internal/readfile"},
	"mod/train/plot":           {"mod/train", "internal/atomicfile"},
	"mod/train/experiment":     {"spec", "autograd", "mod", "mod/train", "mod/train/plot"},
	"cmd/modref":               {"spec", "autograd", "nn", "mod", "ref", "golden", "golden/format", "golden/diagnose", "golden/judge", "golden/oracle", "mod/modcase", "internal/atomicfile", "internal/readfile", "internal/dirlock", "internal/candidate", "golden/fuzzcase", "mod/train", "mod/train/plot"},
	"fuzz":                     {"spec", "autograd", "nn", "mod", "ref", "golden", "golden/format", "golden/diagnose", "golden/judge", "mod/modcase"},
}

// allowedInTests extends allowed for a package's tests (in-package and
// external): tests may use the oracle and the adapters, but ref's tests, like
// ref, stay clear of the implementations under test. Every other package's
// tests may also use internal/fmacheck, internal/benchcpu (a benchmark's CPU
// time), internal/lowp (values rounded to a low precision, as a bf16
// candidate writes them) and internal/race (whether the race detector is
// on, and time bounds scaled for it).
var allowedInTests = map[string][]string{
	"ref":               {"spec", "internal/fmacheck"},
	"internal/elem":     {"internal/fmacheck"},
	"ref/internal/prod": {"internal/fmacheck"},
	"mod":               {"spec", "autograd", "nn", "mod", "ref", "golden", "golden/format", "golden/diagnose", "golden/judge", "golden/oracle", "mod/modcase", "internal/fmacheck", "internal/benchcpu"},
	// golden's tests regenerate the corpus as gen does, with the float32
	// tolerances mod/modcase measures (golden.Tolerancer).
	"golden": {"spec", "internal/elem", "ref", "golden/format", "golden/oracle", "golden/judge", "golden/diagnose", "internal/atomicfile", "internal/readfile", "internal/dirlock", "internal/lowp", "internal/fmacheck", "internal/benchcpu", "internal/race", "mod/modcase"},
	// golden/fuzzcase's tests generate drawn cases as modref fuzz does
	// (with mod/modcase's float32 tolerances) and judge a planted
	// deviation's candidate on them (golden/diagnose, golden/judge): a
	// shrunk reproducer must still fail.
	"golden/fuzzcase": {"spec", "internal/elem", "golden", "golden/format", "golden/diagnose", "golden/judge", "mod/modcase", "internal/fmacheck", "internal/benchcpu", "internal/lowp", "internal/race"},
}

// TestImportRule checks every package of the module against allowed, and
// that spec imports only the standard library.
func TestImportRule(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		"{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}",
		module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "|")
		if len(fields) != 3 {
			t.Fatalf("go list printed %q, want path|imports|test imports", line)
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		rule, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s is not in the import rule; add it to docs/design.md and to allowed", pkg)
			continue
		}
		seen++
		check(t, pkg, "", strings.Fields(fields[1]), rule)
		testRule, ok := allowedInTests[pkg]
		if !ok {
			testRule = append(slices.Clone(rule), "internal/fmacheck", "internal/benchcpu", "internal/lowp", "internal/race")
		}
		check(t, pkg, " (tests)", strings.Fields(fields[2]), testRule)
		if pkg == "spec" {
			for _, imp := range strings.Fields(fields[1]) {
				if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
					t.Errorf("spec imports %s; it may import only the standard library", imp)
				}
			}
		}
	}
	if seen != len(allowed) {
		t.Errorf("go list found %d of the %d packages of the rule", seen, len(allowed))
	}
}

// TestRuleRunsDown checks allowed against layers: every package of the rule
// is in exactly one layer, and may import only packages of lower layers, so
// that an import that runs up fails here even when added to allowed; a
// package under internal/ may import only other internal/ packages (the
// leaves).
func TestRuleRunsDown(t *testing.T) {
	layer := make(map[string]int)
	for i, ps := range layers {
		for _, p := range ps {
			if _, dup := layer[p]; dup {
				t.Errorf("package %s is in two layers", p)
			}
			layer[p] = i
		}
	}
	for pkg, imports := range allowed {
		l, ok := layer[pkg]
		if !ok {
			t.Errorf("package %s of the rule is in no layer; draw it in docs/design.md and add it to layers", pkg)
			continue
		}
		for _, imp := range imports {
			if li, ok := layer[imp]; !ok || li >= l {
				t.Errorf("%s (layer %d) may import %s (layer %d): an import must run down", pkg, l, imp, li)
			}
			if strings.HasPrefix(pkg, "internal/") && !strings.HasPrefix(imp, "internal/") {
				t.Errorf("%s may import %s: internal/ holds leaf utilities, which import only each other", pkg, imp)
			}
		}
	}
	if len(layer) != len(allowed) {
		t.Errorf("layers has %d packages, allowed %d", len(layer), len(allowed))
	}
}

// check reports every module import of pkg not in rule (pkg itself, for an
// external test package, is allowed).
func check(t *testing.T, pkg, what string, imports, rule []string) {
	t.Helper()
	for _, imp := range imports {
		rel, ok := strings.CutPrefix(imp, module+"/")
		if !ok || rel == pkg || slices.Contains(rule, rel) {
			continue
		}
		t.Errorf("%s%s imports %s; docs/design.md allows only %v", pkg, what, rel, rule)
	}
}
