package fuzz

import (
	"math"
	"testing"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// badRatios are capacity ratios every rule must reject.
var badRatios = []float64{0, -0.5, 1.0000001, 2, math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1)}

var capCount struct{ exact, logNonMonotoneS, rejected int }

// capacityProp is docs/spec.md §3: k within [1, S]; the ratio rule
// monotone in c and S, the log rule monotone in c; the float-robust floor
// (c = m/100 gives k = m·S/100 exactly when 100 divides m·S); integer
// capacity exact or an error; invalid ratios rejected.
func capacityProp(t failer, src Source) {
	s := src.Int(1, 5000, "S")
	m := src.Int(1, 100, "m")
	c1 := float64(m) / 100
	if src.Int(0, 1, "arbitrary c") == 1 {
		c1 = float64(src.Int(1, 1<<20, "c numerator")) / (1 << 20)
	}
	c2 := math.Min(1, c1+float64(src.Int(0, 1000, "dc"))/1000)
	s2 := s + src.Int(0, 300, "dS")

	k1, err := ref.CapacityFromRatio(c1, s)
	if err != nil {
		t.Fatalf("CapacityFromRatio(%v, %d): %v", c1, s, err)
	}
	if k1 < 1 || k1 > s {
		t.Fatalf("CapacityFromRatio(%v, %d) = %d, want 1 <= k <= S", c1, s, k1)
	}
	// The floor: k is the largest integer <= c*S + 1e-9, unless clamped to 1.
	v := c1*float64(s) + ref.FloorSlack
	if k1 > 1 && !(float64(k1) <= v && float64(k1+1) > v) {
		t.Fatalf("CapacityFromRatio(%v, %d) = %d, want the largest integer <= c*S + 1e-9 = %v", c1, s, k1, v)
	}
	if c1 == float64(m)/100 && (m*s)%100 == 0 {
		capCount.exact++
		if k1 != max(1, m*s/100) {
			t.Fatalf("CapacityFromRatio(%d/100, %d) = %d, want exactly m*S/100 = %d (float-robust floor)", m, s, k1, m*s/100)
		}
	}
	k2, err := ref.CapacityFromRatio(c2, s)
	if err != nil || k2 < k1 {
		t.Fatalf("CapacityFromRatio not monotone in c: c=%v gives %d, c=%v >= it gives %d (err %v), S = %d", c1, k1, c2, k2, err, s)
	}
	k3, err := ref.CapacityFromRatio(c1, s2)
	if err != nil || k3 < k1 {
		t.Fatalf("CapacityFromRatio not monotone in S: S=%d gives %d, S=%d gives %d (err %v), c = %v", s, k1, s2, k3, err, c1)
	}

	// Log rule: in [1, S], monotone in c (not in S, by design).
	smax := max(2, s2)
	l1, err1 := ref.CapacityFromLog(c1, s, smax)
	l2, err2 := ref.CapacityFromLog(c2, s, smax)
	if err1 != nil || err2 != nil {
		t.Fatalf("CapacityFromLog(c, %d, %d): %v, %v", s, smax, err1, err2)
	}
	if l1 < 1 || l1 > s || l2 < l1 {
		t.Fatalf("CapacityFromLog: c=%v gives %d, c=%v gives %d at S=%d, S_max=%d; want 1 <= k <= S, monotone in c", c1, l1, c2, l2, s, smax)
	}
	if _, err := ref.CapacityFromLog(c1, smax+1, smax); err == nil {
		t.Fatalf("CapacityFromLog(%v, S=%d > S_max=%d) accepted", c1, smax+1, smax)
	}
	if k, err := ref.CapacityFromLog(c1, 1, smax); err != nil || k != 1 {
		t.Fatalf("CapacityFromLog(%v, 1, %d) = %d, %v, want 1 (ratio(1) = 1)", c1, smax, k, err)
	}

	// Integer rule: k = C for 1 <= C <= S, an error otherwise; with padding
	// k_b = min(C, V_b).
	capTokens := src.Int(-2, s+2, "C")
	k, err := ref.CapacityFromInteger(capTokens, s)
	if (capTokens >= 1 && capTokens <= s) != (err == nil) || (err == nil && k != capTokens) {
		t.Fatalf("CapacityFromInteger(%d, %d) = %d, %v; want C when 1 <= C <= S, else an error", capTokens, s, k, err)
	}
	vb := src.Int(0, s, "V_b")
	if capTokens >= 1 && capTokens <= s {
		kb, err := ref.TokensFor(spec.Capacity{Kind: spec.CapacityInteger, Tokens: capTokens}, vb, s)
		if err != nil || kb != min(capTokens, vb) {
			t.Fatalf("integer capacity C=%d with V_b=%d, S=%d: k = %d, %v; want min(C, V_b) = %d", capTokens, vb, s, kb, err, min(capTokens, vb))
		}
	}
	kr, err := ref.TokensFor(spec.Capacity{Kind: spec.CapacityRatio, Ratio: c1}, vb, s)
	if err != nil || (vb == 0 && kr != 0) || (vb > 0 && (kr < 1 || kr > vb)) {
		t.Fatalf("ratio capacity c=%v with V_b=%d: k = %d, %v; want 0 for V_b = 0, else in [1, V_b]", c1, vb, kr, err)
	}

	// Invalid ratios are errors for both rules, never a k.
	bad := src.Pick(badRatios, "bad c")
	if k, err := ref.CapacityFromRatio(bad, s); err == nil {
		t.Fatalf("CapacityFromRatio(%v, %d) = %d, want an error (c outside (0, 1])", bad, s, k)
	}
	if k, err := ref.CapacityFromLog(bad, s, smax); err == nil {
		t.Fatalf("CapacityFromLog(%v, %d, %d) = %d, want an error (c outside (0, 1])", bad, s, smax, k)
	}
	capCount.rejected++
}

func TestCapacity(t *testing.T) {
	capCount.exact, capCount.rejected = 0, 0
	for range 10 {
		check(t, capacityProp)
	}
	if capCount.exact == 0 || capCount.rejected == 0 {
		t.Fatalf("the generator drew %d exact m/100 cases and %d invalid ratios; want both > 0", capCount.exact, capCount.rejected)
	}
	t.Logf("exact m*S/100 cases: %d of 1000", capCount.exact)
}

// TestLogCapacityNotMonotoneInS records that the log rule's k falls with S
// somewhere (ref.Choices: "monotone in c, not in S"), so that the capacity
// property above rightly asserts monotonicity in c only.
func TestLogCapacityNotMonotoneInS(t *testing.T) {
	const c, smax = 0.01, 1000
	prev := 0
	for s := 1; s <= smax; s++ {
		k, err := ref.CapacityFromLog(c, s, smax)
		if err != nil {
			t.Fatal(err)
		}
		if k < prev {
			t.Logf("log rule c=%v, S_max=%d: k(%d) = %d < k(%d) = %d", c, smax, s, k, s-1, prev)
			return
		}
		prev = k
	}
	t.Fatalf("log rule c=%v, S_max=%d is monotone in S over 1..S_max; ref documents that it is not", c, smax)
}

func FuzzCapacity(f *testing.F) {
	f.Fuzz(fuzzBytes(capacityProp))
}
