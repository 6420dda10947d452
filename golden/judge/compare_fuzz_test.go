package judge

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modref/modref/golden/format"
)

// fuzzBytes draws FuzzCompare's choices from its bytes, as golden/format's
// fuzz tests draw theirs: a byte per small choice, eight (little-endian) for
// a value, so that every int64 and float64 bit pattern is reachable; zeros
// once the bytes run out.
type fuzzBytes []byte

// take returns the next n bytes, zeros past the end.
func (b *fuzzBytes) take(n int) []byte {
	v := make([]byte, n)
	*b = (*b)[copy(v, *b):]
	return v
}

func (b *fuzzBytes) intn(n int) int { return int(b.take(1)[0]) % n }

func (b *fuzzBytes) u64() uint64 { return binary.LittleEndian.Uint64(b.take(8)) }

var fuzzCases = sync.OnceValues(func() ([]*format.Case, error) {
	var cs []*format.Case
	for _, n := range []string{"layer-paper", "layer-padding", "layer-causal-router", "layer-ties", "model-every-other", "decode-router"} {
		c, err := format.Load("../corpus", n)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
})

// FuzzCompare: Compare judges a case's own expected arrays changed as the
// bytes say (values over the full int64 and float64 ranges, reshaped,
// widened, dropped, converted) without a panic; the verdict is JSON; an
// unchanged candidate passes; a selected position outside [−1, S) or a
// non-finite value is refused with ErrBadValue.
func FuzzCompare(f *testing.F) {
	f.Add(uint8(0), []byte{})
	f.Add(uint8(0), []byte{1, 2, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add(uint8(4), []byte{2, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f})
	cases, err := fuzzCases()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		c := cases[int(which)%len(cases)]
		s := (*fuzzBytes)(&data)
		cand := map[string]*format.Array{}
		var names []string
		for _, info := range c.Manifest.Arrays {
			if info.Role == format.RoleExpected {
				a := c.Arrays[info.Name]
				n := format.CandidateName(info.Name)
				cand[n] = &format.Array{Shape: slices.Clone(a.Shape), F: slices.Clone(a.F), I: slices.Clone(a.I), DType: a.DType}
				names = append(names, n)
			}
		}
		changed, badValue := false, false
		for range s.intn(5) {
			n := names[s.intn(len(names))]
			a := cand[n]
			if a == nil {
				continue
			}
			changed = true
			switch s.intn(6) {
			case 0:
				delete(cand, n)
			case 1:
				if len(a.Shape) > 0 {
					a.Shape = append(slices.Clone(a.Shape[1:]), a.Shape[0])
				}
			case 2: // a wider or narrower list: one column more or less
				if len(a.Shape) == 2 && a.I != nil {
					w := a.Shape[1] + 1 - 2*s.intn(2)
					if w > 0 {
						b := make([]int64, a.Shape[0]*w)
						for i := range b {
							b[i] = -1
						}
						for r := range a.Shape[0] {
							copy(b[r*w:(r+1)*w], a.I[r*a.Shape[1]:min((r+1)*a.Shape[1], r*a.Shape[1]+w)])
						}
						a.I, a.Shape[1] = b, w
					}
				}
			default: // one value over the full range
				k := s.intn(max(a.Len(), 1))
				v := s.u64()
				if a.I != nil && k < len(a.I) {
					a.I[k] = int64(v)
				} else if k < len(a.F) {
					a.F[k] = math.Float64frombits(v)
				}
			}
		}
		for n, a := range cand {
			for _, v := range a.I {
				if strings.HasSuffix(n, "selected") && (v < -1 || v >= int64(c.Manifest.Config.SeqLen)) {
					badValue = true
				}
			}
			for _, v := range a.F {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					badValue = true
				}
			}
		}
		res, err := Compare(c, cand, s.intn(2) == 1)
		if err != nil {
			if !changed {
				t.Fatalf("case %s: its own arrays refused: %v", c.Manifest.Name, err)
			}
			return
		}
		if badValue {
			// Only an array Compare never reached (dropped with
			// --allow-missing, or after an error) may hold one: every
			// array here was reached.
			for _, a := range res.Arrays {
				if a.Status != StatusMissing {
					if x := cand[a.Name]; x != nil && hasBad(a.Name, x, c.Manifest.Config.SeqLen) {
						t.Fatalf("case %s: array %q holds an invalid value and was judged %s", c.Manifest.Name, a.Name, a.Status)
					}
				}
			}
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("case %s: the verdict is not JSON: %v", c.Manifest.Name, err)
		}
		if !changed && !res.Pass {
			t.Fatalf("case %s: its own expected arrays fail", c.Manifest.Name)
		}
	})
}

// hasBad reports a selected position outside [−1, S) or a non-finite
// value.
func hasBad(name string, a *format.Array, seqLen int) bool {
	for _, v := range a.I {
		if strings.HasSuffix(name, "selected") && (v < -1 || v >= int64(seqLen)) {
			return true
		}
	}
	for _, v := range a.F {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return true
		}
	}
	return false
}
