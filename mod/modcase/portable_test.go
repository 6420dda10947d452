package modcase

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
)

// portableBits is the SHA-256 of what Float32Tolerances computes on each
// case (the float32 family's arrays, member by member, and the manifest
// tolerances it widens from the constants), as every machine computes it: amd64 with AVX-512,
// with AVX2 and FMA, or neither, GOAMD64=v3, and arm64 (.ci/run runs this
// test under each). The two layer cases are those whose tolerances once
// came out 7 % apart on arm64 (the family then ran on the fastest
// kernels); the model case adds layers, routed and not, and logits.
var portableBits = map[string]string{
	"layer-layernorm-swiglu":    "eac051ab6f2416da14350c45c6cb88e5154b2373181c992167876bcddd96e96a",
	"layer-linear-bias-sigmoid": "8b7758ee7cf0e91164d965f4fd9245229db54fcfc126c52251ee17a6a2e1555d",
	"model-every-other":         "f6c7d274bef280a610106c79135af70bfabee612801edd8fe20dcc74d834cf1a",
}

// TestFloat32TolerancesPortable checks that the tolerances gen writes into
// a case are the same bits on every machine: Float32Tolerances runs the
// family on the Go loops (PortableFamily), and the result must hash to
// portableBits. A mismatch prints each member's own hash, to compare with
// another machine's.
func TestFloat32TolerancesPortable(t *testing.T) {
	f32, _ := format.ParseProfile("float32")
	for _, name := range slices.Sorted(maps.Keys(portableBits)) {
		c := load(t, name)
		for i, info := range c.Manifest.Arrays {
			if info.Role == format.RoleExpected {
				c.Manifest.Arrays[i].Tolerance = oracle.ToleranceFor(info.Name, c.Arrays[info.Name])
			}
		}
		fam, err := PortableFamily(c, f32)
		if err != nil {
			t.Fatal(err)
		}
		all := sha256.New()
		var members []string
		for _, m := range fam {
			h := sha256.New()
			hashArrays(h, m.Arrays)
			hashArrays(all, m.Arrays)
			members = append(members, m.Name+": "+hex.EncodeToString(h.Sum(nil))[:16])
		}
		if err := Float32Tolerances(c); err != nil {
			t.Fatal(err)
		}
		for _, info := range c.Manifest.Arrays {
			if info.Tolerance != nil {
				all.Write([]byte(info.Name))
				binary.Write(all, binary.LittleEndian, math.Float64bits(info.Tolerance.ATol))
				binary.Write(all, binary.LittleEndian, math.Float64bits(info.Tolerance.RTol))
			}
		}
		if got := hex.EncodeToString(all.Sum(nil)); got != portableBits[name] {
			t.Errorf("%s: the float32 family and the tolerances it sets hash to %s on this machine, want %s; members:\n  %s",
				name, got, portableBits[name], members)
		}
	}
}

// hashArrays writes arrays, by name, into h: each name, shape and
// element's bits.
func hashArrays(h hash.Hash, arrays map[string]*format.Array) {
	for _, name := range slices.Sorted(maps.Keys(arrays)) {
		a := arrays[name]
		h.Write([]byte(name))
		binary.Write(h, binary.LittleEndian, int64(len(a.Shape)))
		for _, d := range a.Shape {
			binary.Write(h, binary.LittleEndian, int64(d))
		}
		for _, v := range a.F {
			binary.Write(h, binary.LittleEndian, math.Float64bits(v))
		}
		for _, v := range a.I {
			binary.Write(h, binary.LittleEndian, v)
		}
	}
}
