package mod_test

import (
	"math"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/mod/modcase"
)

// corpusDir is the golden corpus, relative to this package.
const corpusDir = "../golden/corpus"

// TestCorpus runs mod on every case of the golden corpus (modcase.Candidate) and
// judges it with judge.Compare, the judge of `modref check`: every expected
// and gradient array within the tolerance its manifest gives, at valid
// positions for arrays whose leading dimensions are B×S, selections and
// routing decisions exactly. With -v it prints the largest
// |got − expected| / max(‖expected‖∞, 1) per kind of array.
func TestCorpus(t *testing.T) {
	names, err := format.List(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, err := format.Load(corpusDir, name)
			if err != nil {
				t.Fatal(err)
			}
			cand, err := modcase.Candidate(c)
			if err != nil {
				t.Fatal(err)
			}
			res, err := judge.Compare(c, cand, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range res.Arrays {
				if a.Status != judge.StatusPass {
					t.Errorf("%s: %s: max abs %.3g at %v (got %.9g, want %.9g; rtol %g, atol %.3g) %+v",
						name, a.Name, a.MaxAbs, a.Where, a.Got, a.Want, a.Tolerance.RTol, a.Tolerance.ATol, a.Routing)
				}
				recordArray(c, a)
			}
		})
	}
}

// recordArray notes the scaled error of one array for the -measure report.
func recordArray(c *format.Case, a judge.ArrayResult) {
	want := c.Arrays["expected."+a.Name]
	if want == nil {
		want = c.Arrays[a.Name]
	}
	if want == nil || want.IsInt() {
		return
	}
	scale := 1.0
	for _, v := range want.F {
		scale = math.Max(scale, math.Abs(v))
	}
	kind := "corpus forward"
	if strings.HasPrefix(a.Name, "grad.") {
		kind = "corpus gradient"
	}
	record(kind, a.MaxAbs/scale)
	record(kind+": "+arrayKind(a.Name), a.MaxAbs/scale)
}

// arrayKind names an array without its layer prefix: "router_logits" for
// "L2.router_logits", "Wq" for "grad.param.L1.Wq".
func arrayKind(name string) string {
	name = strings.TrimPrefix(name, "grad.param.")
	if len(name) > 1 && name[0] == 'L' && strings.Contains(name, ".") {
		name = name[strings.Index(name, ".")+1:]
	}
	return name
}
