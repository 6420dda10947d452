package ref

import (
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/spec"
	"pgregory.net/rapid"
)

func TestCapacityFromRatioHand(t *testing.T) {
	for _, tc := range []struct {
		c    float64
		s, k int
	}{
		{0.29, 100, 29}, // 0.29*100 = 28.999999999999996 in float64
		{0.5, 7, 3},     // floor(3.5)
		{0.125, 8, 1},   // exactly 1
		{0.1, 5, 1},     // floor(0.5) = 0, clamped to 1
		{1, 7, 7},
		{0.57, 100, 57}, // 0.57*100 = 56.99999999999999
	} {
		k, err := CapacityFromRatio(tc.c, tc.s)
		if err != nil || k != tc.k {
			t.Errorf("CapacityFromRatio(%v, %d) = %d, %v; want %d", tc.c, tc.s, k, err, tc.k)
		}
	}
	for _, tc := range []struct {
		c    float64
		s    int
		want string
	}{{0, 10, "ratio c = 0"}, {1.5, 10, "ratio c = 1.5"}, {0.5, 0, "S = 0"}} {
		if _, err := CapacityFromRatio(tc.c, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CapacityFromRatio(%v, %d) error %v, want one mentioning %q", tc.c, tc.s, err, tc.want)
		}
	}
}

func TestCapacityIntegerAndLogHand(t *testing.T) {
	if k, err := CapacityFromInteger(3, 5); err != nil || k != 3 {
		t.Errorf("CapacityFromInteger(3, 5) = %d, %v", k, err)
	}
	for _, c := range []int{0, 6} {
		if _, err := CapacityFromInteger(c, 5); err == nil || !strings.Contains(err.Error(), "1 <= C <= S") {
			t.Errorf("CapacityFromInteger(%d, 5) error %v, want the allowed range", c, err)
		}
	}
	// c = 1/8, S_max = 2048 = 2^11.
	// S = 2048: ratio = 1 - 1*(7/8) = 1/8, k = 256.
	// S = 64 = 2^6: ratio = 1 - (6/11)(7/8) = 1 - 42/88 = 46/88, k = floor(64*46/88) = floor(33.45) = 33.
	// S = 1: ratio = 1, k = 1.
	for _, tc := range []struct{ s, k int }{{2048, 256}, {64, 33}, {1, 1}} {
		k, err := CapacityFromLog(0.125, tc.s, 2048)
		if err != nil || k != tc.k {
			t.Errorf("CapacityFromLog(0.125, %d, 2048) = %d, %v; want %d", tc.s, k, err, tc.k)
		}
	}
	// Not monotone in S for small c: c = 0.01, S = 1024 = 2^10:
	// ratio = 1 - (10/11)(0.99) = 0.1, k = floor(102.4) = 102; S = 2048: k = floor(20.48) = 20.
	for _, tc := range []struct{ s, k int }{{1024, 102}, {2048, 20}} {
		if k, err := CapacityFromLog(0.01, tc.s, 2048); err != nil || k != tc.k {
			t.Errorf("CapacityFromLog(0.01, %d, 2048) = %d, %v; want %d", tc.s, k, err, tc.k)
		}
	}
	ratio, _ := LogCapacityRatio(0.125, 64, 2048)
	assertScalar(t, "ratio(64)", ratio, 46.0/88.0, 1e-15)
	if _, err := CapacityFromLog(0.125, 4096, 2048); err == nil || !strings.Contains(err.Error(), "S_max = 2048") {
		t.Errorf("S > S_max: error %v, want one naming S_max", err)
	}
}

func TestRowCapacitiesPaddingHand(t *testing.T) {
	// c = 0.5, S = 8: V = 8 -> 4; V = 3 -> floor(1.5) = 1; V = 0 -> 0; V = 1 -> floor(0.5) = 0 -> clamp 1.
	k, err := RowCapacities(spec.Capacity{Kind: spec.CapacityRatio, Ratio: 0.5}, 4, 8, []int{8, 3, 0, 1})
	if err != nil || !slices.Equal(k, []int{4, 1, 0, 1}) {
		t.Errorf("RowCapacities = %v, %v; want [4 1 0 1]", k, err)
	}
	// Integer C = 2 with rows of 8, 1 and 0 valid tokens: min(C, V_b).
	k, err = RowCapacities(spec.Capacity{Kind: spec.CapacityInteger, Tokens: 2}, 3, 8, []int{8, 1, 0})
	if err != nil || !slices.Equal(k, []int{2, 1, 0}) {
		t.Errorf("RowCapacities integer = %v, %v; want [2 1 0]", k, err)
	}
	if _, err := RowCapacities(spec.Capacity{Kind: spec.CapacityRatio, Ratio: 0.5}, 2, 8, []int{8, 9}); err == nil || !strings.Contains(err.Error(), "valid[1] = 9") {
		t.Errorf("valid length beyond S: error %v", err)
	}
	if _, err := RowCapacities(spec.Capacity{Kind: spec.CapacityRatio, Ratio: 0.5}, 2, 8, []int{8}); err == nil || !strings.Contains(err.Error(), "len(valid) = 1") {
		t.Errorf("valid of wrong length: error %v", err)
	}
}

func TestAnnealedRatioHand(t *testing.T) {
	for _, tc := range []struct {
		step int
		want float64
	}{{0, 1}, {5, 0.75}, {10, 0.5}, {20, 0.5}} {
		c, err := AnnealedRatio(1, 0.5, tc.step, 10)
		if err != nil || c != tc.want {
			t.Errorf("AnnealedRatio(1, 0.5, %d, 10) = %v, %v; want %v", tc.step, c, err, tc.want)
		}
	}
	if _, err := AnnealedRatio(0, 0.5, 1, 10); err == nil {
		t.Error("AnnealedRatio with c0 = 0: no error")
	}
}

// k is monotone in c and in S for the fixed ratio, and monotone in c for log
// scaling (log scaling is not monotone in S near S_max: see docs/equations.md).
func TestCapacityMonotoneProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c1 := rapid.Float64Range(1e-6, 1).Draw(t, "c1")
		c2 := rapid.Float64Range(c1, 1).Draw(t, "c2")
		s1 := rapid.IntRange(1, 5000).Draw(t, "s1")
		s2 := rapid.IntRange(s1, 5000).Draw(t, "s2")
		a, _ := CapacityFromRatio(c1, s1)
		b, _ := CapacityFromRatio(c2, s1)
		c, _ := CapacityFromRatio(c1, s2)
		if a > b || a > c || a < 1 || a > s1 {
			t.Fatalf("k(c1=%v,S1=%d)=%d, k(c2=%v,S1)=%d, k(c1,S2=%d)=%d", c1, s1, a, c2, b, s2, c)
		}
		la, _ := CapacityFromLog(c1, s1, 5000)
		lb, _ := CapacityFromLog(c2, s1, 5000)
		if la > lb || la < 1 || la > s1 {
			t.Fatalf("log k(c1=%v,S=%d)=%d > k(c2=%v)=%d", c1, s1, la, c2, lb)
		}
	})
}
