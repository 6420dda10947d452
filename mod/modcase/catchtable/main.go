// Command catchtable measures, for every deviation of docs/spec.md §11 and
// every precision profile, whether `modref check` catches it and `modref
// diagnose` names it on the corpus, and prints the table docs/tolerances.md
// publishes ("What each profile catches"):
//
//	go run ./mod/modcase/catchtable [-corpus DIR] > table.md
//
// A deviant candidate at a profile is the deviation's values
// (diagnose.DeviantCandidate, float64) plus the profile's rounding error on
// the case, the emulated implementation's arrays minus the truth's
// (modcase.Emulate): an implementation with the bug, computed in that
// precision. check catches it on a case when the case judged under the
// profile fails it (near-tie flips rejudged, as check does); the cases are
// those whose manifest claims the deviation. diagnose is run, under the
// profile, on the smallest of them (a layer case when one claims it, the
// fewest tokens, the first in name order): named when the deviation
// matches and the case tells it from the oracle.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/mod/modcase"
)

func main() {
	dir := flag.String("corpus", "golden/corpus", "the corpus `DIR`")
	flag.Parse()
	if err := run(format.Dir(*dir)); err != nil {
		fmt.Fprintln(os.Stderr, "catchtable:", err)
		os.Exit(2)
	}
}

// profiles are the table's columns: the manifests' float32 tolerances
// (the zero profile), then each profile below float64.
var profiles = []string{"", "float32", "tf32", "bf16", "fp16"}

// separation is, for one profile, the caught deviation that came nearest
// its tolerance: the smallest, over the deviations and cases check
// catches, of the case's worst error/tolerance ratio (docs/tolerances.md
// sets it beside the largest ratio of a correct implementation).
type separation struct {
	ratio     float64
	dev, name string
}

// worstRatio returns a failed comparison's largest error/tolerance ratio
// over its float arrays: +Inf when an exact array (a routing decision, a
// 0/1 target) failed, which no tolerance excuses.
func worstRatio(res *judge.CaseResult) float64 {
	worst := 0.0
	for _, a := range res.Arrays {
		bound := a.Tolerance.ATol + float64(a.Tolerance.RTol*math.Abs(a.Want))
		if (a.Routing != nil || bound == 0) && a.Status != judge.StatusPass {
			return math.Inf(1) // caught exactly: a routing decision, a target
		}
		if bound == 0 {
			continue
		}
		worst = math.Max(worst, math.Abs(a.Got-a.Want)/bound)
	}
	if worst == 0 {
		return math.Inf(1)
	}
	return worst
}

// cell is one deviation under one profile.
type cell struct {
	claimed, caught int
	missed          []string
	named           bool
	namedOn         string
	err             string
}

func run(d format.Corpus) error {
	names, err := d.List()
	if err != nil {
		return err
	}
	cells := map[string][]cell{}
	seps := make([]separation, len(profiles))
	for i := range seps {
		seps[i].ratio = math.Inf(1)
	}
	for _, dev := range format.Deviations {
		cells[dev.Name] = make([]cell, len(profiles))
	}
	first := map[string]string{}
	cases := map[string]*format.Case{}
	for _, name := range names {
		c, err := d.Load(name)
		if err != nil {
			return err
		}
		cases[name] = c
		for _, dev := range c.Manifest.Catches {
			if f, ok := first[dev]; !ok || smaller(c, cases[f]) {
				first[dev] = name
			}
		}
	}
	for _, name := range names {
		c := cases[name]
		fmt.Fprintf(os.Stderr, "%s\n", name)
		judged := make([]*format.Case, len(profiles))
		noise := make([]map[string]*format.Array, len(profiles))
		for i, pn := range profiles {
			p, _ := format.ParseProfile(pn)
			if p.IsZero() {
				judged[i] = c
				continue
			}
			fam, err := modcase.EmulateFamily(c, p)
			if err != nil {
				return err
			}
			if judged[i], _, err = judge.Tolerances(p, c, modcase.FamilyArrays(fam)...); err != nil {
				return err
			}
			noise[i] = fam[0].Arrays
		}
		for _, dev := range c.Manifest.Catches {
			dv, err := diagnose.DeviantCandidate(c, dev, "")
			for i := range profiles {
				cl := &cells[dev][i]
				cl.claimed++
				if err != nil {
					cl.err = err.Error()
					continue
				}
				cand := withNoise(c, dv, noise[i])
				res, err := judge.Compare(judged[i], cand, false)
				if err == nil && !res.Pass {
					res, err = judge.JudgeFlips(judged[i], cand, res, false)
				}
				switch {
				case err != nil:
					cl.err = err.Error()
				case res.Pass:
					cl.missed = append(cl.missed, name)
				default:
					cl.caught++
					if r := worstRatio(res); r < seps[i].ratio {
						seps[i] = separation{r, dev, name}
					}
				}
				if first[dev] != name {
					continue
				}
				cl.namedOn = name
				rs, err := diagnose.Diagnose(judged[i], cand)
				if err != nil {
					cl.err = err.Error()
					continue
				}
				for _, r := range rs[1:] {
					if r.Name == dev && r.Match && r.Distinct {
						cl.named = true
					}
				}
			}
		}
	}
	printTable(cells)
	for i, sp := range seps {
		fmt.Fprintf(os.Stderr, "separation %q: smallest caught deviation %.3g × its tolerance (%s on %s)\n", profiles[i], sp.ratio, sp.dev, sp.name)
	}
	return nil
}

// smaller reports whether case a is a better one to run diagnose on than
// b: a layer case before any other, then the fewer tokens.
func smaller(a, b *format.Case) bool {
	la, lb := a.Manifest.Kind == format.KindLayer, b.Manifest.Kind == format.KindLayer
	if la != lb {
		return la
	}
	ta, tb := a.Manifest.Config.Batch*a.Manifest.Config.SeqLen, b.Manifest.Config.Batch*b.Manifest.Config.SeqLen
	return ta < tb
}

// withNoise returns the deviant arrays plus the profile's rounding error,
// the emulation's arrays minus the truth's, where both are float arrays of
// the same shape; nil noise (the manifests' tolerances) adds none.
func withNoise(c *format.Case, dv, base map[string]*format.Array) map[string]*format.Array {
	out := map[string]*format.Array{}
	for name, a := range dv {
		out[name] = a
		b, ok := base[name]
		truth, tok := c.Arrays["expected."+name]
		if !tok {
			truth, tok = c.Arrays[name]
		}
		if !ok || !tok || a.F == nil || b.F == nil || truth.F == nil || !slices.Equal(a.Shape, b.Shape) || !slices.Equal(a.Shape, truth.Shape) {
			continue
		}
		n := &format.Array{Shape: a.Shape, F: slices.Clone(a.F), DType: a.DType}
		for k := range n.F {
			n.F[k] += b.F[k] - truth.F[k]
		}
		out[name] = n
	}
	return out
}

func printTable(cells map[string][]cell) {
	fmt.Println("| deviation | claimed by | manifests' float32 | float32 | tf32 | bf16 | fp16 | diagnose on |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, dev := range format.Deviations {
		row := cells[dev.Name]
		if row[0].claimed == 0 {
			fmt.Printf("| `%s` | no case | | | | | | |\n", dev.Name)
			continue
		}
		fmt.Printf("| `%s` | %d", dev.Name, row[0].claimed)
		for _, cl := range row {
			named := "not named"
			if cl.named {
				named = "named"
			}
			text := fmt.Sprintf("%d/%d, %s", cl.caught, cl.claimed, named)
			if cl.err != "" {
				text += " (error: " + cl.err + ")"
			}
			if len(cl.missed) > 0 {
				text += "; missed on " + strings.Join(cl.missed, ", ")
			}
			fmt.Printf(" | %s", text)
		}
		fmt.Printf(" | %s |\n", row[0].namedOn)
	}
}
