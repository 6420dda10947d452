package main

import (
	"math"
	"reflect"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/fuzzcase"
	"github.com/modref/modref/mod/modcase"
)

// TestJudgeFuzzCaseIsJudgingWithTheFloat32Tolerances: judgeFuzzCase, which
// computes a case's float32 tolerances only where they can matter, gives
// the verdict judging under them every time gives, and skips them only
// where no array's ratio under them could pass the closest pass so far;
// on drawn cases of every kind but MoDE (whose generation costs most), up
// to two the family widens, for mod's own float32 implementation and
// for it with one element moved between the constant tolerance and the
// float32 one (failing the first, passing the second: judged again under
// the second, it passes) or beyond both (it fails).
func TestJudgeFuzzCaseIsJudgingWithTheFloat32Tolerances(t *testing.T) {
	sp := fuzzcase.Space{MaxSeq: 24}
	between, beyond, skipped := 0, 0, 0
	closest := -1.0
	for idx := 0; idx < 80 && (between < 2 || idx < 12); idx++ {
		g, err := fuzzcase.Draw(5, idx, 0, sp)
		if err != nil {
			t.Fatal(err)
		}
		if g.Kind == format.KindMoDE {
			continue
		}
		c, err := golden.GenerateUnmeasured(g, nil)
		if err != nil {
			continue // ungenerable: fuzz draws again
		}
		full, err := golden.GenerateUnmeasured(g, modcase.Float32Tolerances)
		if err != nil {
			t.Fatal(err)
		}
		cand, err := modcase.Candidate(c)
		if err != nil {
			t.Fatal(err)
		}
		type variant struct {
			name string
			cand map[string]*format.Array
			pass bool
		}
		vs := []variant{{"mod", cand, true}}
		if v, ok := moved(c, full, cand, 0.5); ok {
			vs = append(vs, variant{"between the tolerances", v, true})
			between++
		}
		if v, ok := moved(c, full, cand, 2); ok {
			vs = append(vs, variant{"beyond both", v, false})
			beyond++
		}
		for _, v := range vs {
			want, err := judgeCandidate(full, v.cand)
			if err != nil {
				t.Fatal(err)
			}
			lazy := &format.Case{Manifest: cloneManifest(c.Manifest), Arrays: c.Arrays}
			got, widened, err := judgeFuzzCase(lazy, v.cand, closest)
			if err != nil {
				t.Fatal(err)
			}
			if got.Pass != want.Pass || want.Pass != v.pass {
				t.Errorf("%s (%s), %s: judgeFuzzCase passes %v, under the float32 tolerances %v; want %v", g.Name, fuzzcase.Size(g), v.name, got.Pass, want.Pass, v.pass)
			}
			if widened {
				if !reflect.DeepEqual(lazy.Manifest, full.Manifest) {
					t.Errorf("%s, %s: the widened manifest is not gen's", g.Name, v.name)
				}
				if r, w := closestRatio(got), closestRatio(want); r != w {
					t.Errorf("%s, %s: widened, closest ratio %g, want %g", g.Name, v.name, r, w)
				}
			} else {
				skipped++
				if w := closestRatio(want); w > closest {
					t.Errorf("%s, %s: not widened, but its ratio %g under the float32 tolerances passes the closest %g", g.Name, v.name, w, closest)
				}
			}
			if v.name == "mod" {
				closest = math.Max(closest, closestRatio(want))
			}
		}
	}
	if between == 0 || beyond == 0 || skipped == 0 {
		t.Errorf("%d candidates between the tolerances, %d beyond, %d judged without widening: want some of each", between, beyond, skipped)
	}
}

// moved returns cand with one element of an array the float32 tolerances
// widen (its largest in magnitude, judged: a padded position's truth is 0)
// moved from the truth by the constant tolerance plus f times the
// widening there; ok is false when no array is widened.
func moved(c, full *format.Case, cand map[string]*format.Array, f float64) (map[string]*format.Array, bool) {
	for i, info := range c.Manifest.Arrays {
		old, wide := info.Tolerance, full.Manifest.Arrays[i].Tolerance
		if info.Role != format.RoleExpected || old == nil || wide == nil || wide.ATol <= old.ATol || c.Arrays[info.Name].F == nil {
			continue
		}
		name := format.CandidateName(info.Name)
		want := c.Arrays[info.Name]
		k := 0
		for j, e := range want.F {
			if math.Abs(e) > math.Abs(want.F[k]) {
				k = j
			}
		}
		if want.F[k] == 0 {
			continue
		}
		e := want.F[k]
		v := *cand[name]
		v.F = append([]float64(nil), cand[name].F...)
		v.F[k] = e + old.ATol + float64(old.RTol*math.Abs(e)) + float64(f*(wide.ATol-old.ATol))
		out := make(map[string]*format.Array, len(cand))
		for k, a := range cand {
			out[k] = a
		}
		out[name] = &v
		return out, true
	}
	return nil, false
}

// cloneManifest copies a manifest deeply enough for judgeFuzzCase to widen
// the copy's tolerances.
func cloneManifest(m *format.Manifest) *format.Manifest {
	cp := *m
	cp.Arrays = append([]format.ArrayInfo(nil), m.Arrays...)
	return &cp
}

// TestFuzzSkipsFloat32TolerancesUnderAProfile: under a precision profile a
// case's manifest tolerances are replaced by the profile's, so that the
// case fuzz judges without its float32 tolerances is judged exactly as
// with them.
func TestFuzzSkipsFloat32TolerancesUnderAProfile(t *testing.T) {
	sp := fuzzcase.Space{MaxSeq: 8, Base: map[string]any{"precision": "bf16"}}
	n := 0
	for idx := 0; n < 6 && idx < 30; idx++ {
		g, err := fuzzcase.Draw(3, idx, 0, sp)
		if err != nil {
			t.Fatal(err)
		}
		c, err := golden.GenerateUnmeasured(g, nil)
		if err != nil {
			continue
		}
		full, err := golden.GenerateUnmeasured(g, modcase.Float32Tolerances)
		if err != nil {
			t.Fatal(err)
		}
		a, _, _, err := underProfile(c, format.Profile{})
		if err != nil {
			t.Fatal(err)
		}
		b, _, _, err := underProfile(full, format.Profile{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Manifest.Arrays, b.Manifest.Arrays) || !reflect.DeepEqual(a.Manifest.Routing, b.Manifest.Routing) {
			t.Errorf("%s (%s): judged under bf16, its tolerances depend on its float32 ones", g.Name, fuzzcase.Size(g))
		}
		cand, err := modcase.Candidate(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, widened, err := judgeFuzzCase(c, cand, -1); err != nil || widened {
			t.Errorf("%s: judgeFuzzCase under bf16: widened %v, error %v; want neither", g.Name, widened, err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no case generated")
	}
}
