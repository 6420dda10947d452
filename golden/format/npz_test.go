package format

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNPZRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.npz")
	want := map[string]*Array{
		"scalar":   Scalar(-0.5),
		"vector":   Float([]float64{1, 2.5, -3}, 3),
		"matrix":   Float([]float64{1, 2, 3, 4, 5, 6}, 2, 3),
		"cube":     Float([]float64{1, 2, 3, 4, 5, 6, 7, 8}, 2, 2, 2),
		"selected": Int([]int64{0, 3, -1, 2}, 2, 2),
	}
	if err := WriteNPZ(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNPZ(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// TestNPZLargeRoundTrip round-trips arrays larger than the 32 KiB window of
// a deflated zip entry, at which npyio's reader used to take a short read
// for a whole value and garble the rest of the array.
func TestNPZLargeRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "large.npz")
	want := map[string]*Array{}
	for _, n := range []int{4097, 20000} {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(i) * 1.37
		}
		want[fmt.Sprintf("f%d", n)] = Float(v, n)
	}
	if err := WriteNPZ(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNPZ(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// TestNPZStoresLargeArrays checks how each entry is kept: deflated up to
// storeAbove bytes, stored (uncompressed) above it and in a scratch case,
// and every value read back as written, integers among them.
func TestNPZStoresLargeArrays(t *testing.T) {
	big := make([]int64, storeAbove/8)
	for i := range big {
		big[i] = int64(i) - 7
	}
	arrays := map[string]*Array{"small": Float([]float64{1, -2.5}, 2), "big": Int(big, len(big))}
	for _, store := range []bool{false, true} {
		raw, err := encodeNPZ(arrays, store)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			want := zip.Deflate
			if store || f.Name == "big.npy" {
				want = zip.Store
			}
			if f.Method != want {
				t.Errorf("store = %t: %s has method %d, want %d", store, f.Name, f.Method, want)
			}
		}
		got, err := readNPZ(bytes.NewReader(raw), int64(len(raw)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(arrays, got); diff != "" {
			t.Errorf("store = %t: round trip (-want +got):\n%s", store, diff)
		}
	}
}

// TestNPZReadByNumPy checks that numpy.load reads what WriteNPZ writes, and
// that ReadNPZ reads what numpy.savez writes, including float32 and int32. It
// needs Python with NumPy ($MODREF_PYTHON, else python3 on PATH); .ci/run
// installs Debian's python3-numpy.
func TestNPZReadByNumPy(t *testing.T) {
	python := pythonWithNumPy(t)
	dir := t.TempDir()
	ours := filepath.Join(dir, "ours.npz")
	if err := WriteNPZ(ours, map[string]*Array{
		"expected.out": Float([]float64{1, 2, 3, 4, 5, 6}, 1, 2, 3),
		"selected":     Int([]int64{4, 7}, 2),
		"aux.total":    Scalar(0.25),
	}); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "theirs.npz")
	script := `
import sys, numpy as np
z = np.load(sys.argv[1])
assert z["expected.out"].shape == (1, 2, 3) and z["expected.out"].dtype == np.float64, z["expected.out"]
assert z["expected.out"][0, 1, 2] == 6.0
assert z["selected"].dtype == np.int64 and list(z["selected"]) == [4, 7]
assert z["aux.total"].shape == () and float(z["aux.total"]) == 0.25
np.savez(sys.argv[2], **{"out": np.arange(6, dtype=np.float32).reshape(2, 3),
                         "selected": np.array([[1, 5]], dtype=np.int32)})
`
	out, err := exec.Command(python, "-c", script, ours, theirs).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	got, err := ReadNPZ(theirs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*Array{
		"out":      {Shape: []int{2, 3}, F: []float64{0, 1, 2, 3, 4, 5}, DType: "<f4"},
		"selected": {Shape: []int{1, 2}, I: []int64{1, 5}, DType: "<i4"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("numpy.savez output read back (-want +got):\n%s", diff)
	}
}

func TestReadNPZErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.npz")
	if err := WriteNPZ(good, map[string]*Array{"x": Float([]float64{1, 2, 3, 4}, 2, 2)}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		path string
		want string
	}{
		{filepath.Join(dir, "missing.npz"), "missing.npz"},
		{write("truncated.npz", raw[:len(raw)/2]), "truncated.npz: not a readable .npz archive"},
		{write("text.npz", []byte("hello")), "text.npz: not a readable .npz archive"},
		{write("empty.npz", nil), "empty.npz"},
	} {
		_, err := ReadNPZ(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadNPZ(%s) = %v, want an error containing %q", filepath.Base(c.path), err, c.want)
		}
	}
}

// TestWriteNPZShapeMismatch: an array whose shape does not hold exactly its
// data is refused, naming it, and nothing is written.
func TestWriteNPZShapeMismatch(t *testing.T) {
	dir := t.TempDir()
	for _, a := range []*Array{
		{Shape: []int{4}, F: []float64{1, 2, 3}, DType: "<f8"},
		{Shape: []int{2, 3}, F: []float64{1, 2, 3, 4, 5}, DType: "<f8"},
		{Shape: []int{2, 2}, I: []int64{1, 2, 3, 4, 5}, DType: "<i8"},
		{Shape: []int{}, F: []float64{1, 2}, DType: "<f8"},
	} {
		err := WriteNPZ(filepath.Join(dir, "x.npz"), map[string]*Array{"bad": a})
		if err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), "holds") {
			t.Errorf("shape %v with %d values: %v, want an error naming the array", a.Shape, max(len(a.F), len(a.I)), err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("WriteNPZ left %d files", len(ents))
	}
}

// TestReadDeflatedUnaligned: a deflated array over 32 KB whose data starts
// at an offset that is not a multiple of 8 (a header length numpy would not
// write, but another writer may) reads back bit for bit; the decompressor's
// short reads are completed, never padded (issue 16's audit found the
// npyio-based reader corrupting such arrays).
func TestReadDeflatedUnaligned(t *testing.T) {
	const n = 5000 // 40 KB of float64
	want := make([]float64, n)
	var data []byte
	for i := range want {
		want[i] = math.Float64frombits(uint64(i)*0x9E3779B97F4A7C15 | 1)
		if math.IsNaN(want[i]) {
			want[i] = float64(i)
		}
		data = binary.LittleEndian.AppendUint64(data, math.Float64bits(want[i]))
	}
	for _, pad := range []int{0, 1, 3, 5} {
		raw := npy("<f8", []int{n}, data, 1, pad)
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "x.npy", Method: zip.Deflate})
		w.Write(raw)
		zw.Close()
		got, err := readNPZ(bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil)
		if err != nil {
			t.Fatalf("pad %d: %v", pad, err)
		}
		for i := range want {
			if math.Float64bits(got["x"].F[i]) != math.Float64bits(want[i]) {
				t.Fatalf("pad %d (data at offset %d): element %d is %v, want %v", pad, len(raw)-len(data), i, got["x"].F[i], want[i])
			}
		}
	}
}
