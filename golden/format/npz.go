package format

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/sbinet/npyio/npz"

	"github.com/modref/modref/internal/atomicfile"
)

// ReadNPZ reads every array of an .npz file. It accepts little-endian
// float64, float32, int64 and int32 arrays in C order, and returns one error
// naming the file and the array for anything else: a path that is missing
// or not a regular file, a file that is truncated or not a zip archive, a
// member whose CRC-32 or length is wrong, an entry that is not a valid .npy,
// data not exactly as long as its header declares, another dtype, a
// Fortran-ordered array, sizes beyond the reader's bounds
// (docs/golden-format.md). It never panics.
func ReadNPZ(path string) (map[string]*Array, error) {
	return readNPZFile(path, nil)
}

// ReadCandidate reads the arrays of a candidate .npz that case c judges.
// Each may hold at most as many elements as the case's expected array (a
// list of selected positions, whose width may differ, at most B×S), so
// memory is bounded by what the case needs; arrays the case does not judge
// are streamed through the CRC-32 check and dropped, never decoded. Errors
// are those of ReadNPZ.
func ReadCandidate(path string, c *Case) (map[string]*Array, error) {
	plan := &readPlan{arrays: make(map[string]int), what: "case " + c.Manifest.Name}
	for _, info := range c.Manifest.Arrays {
		if info.Role != RoleExpected {
			continue
		}
		n := Elements(info.Shape)
		if strings.HasSuffix(info.Name, "selected") && len(info.Shape) == 2 {
			n = max(n, info.Shape[0]*c.Manifest.Config.SeqLen)
		}
		plan.arrays[CandidateName(info.Name)] = n
	}
	return readNPZFile(path, plan)
}

// UnwrapPath drops the path that os errors repeat, since callers name it.
func UnwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// WriteNPZ writes arrays to path as an .npz archive that numpy.load reads,
// entries in name order. An array whose shape does not hold exactly its
// data is an error naming it. It writes to a temporary file in the same
// directory and renames it into place (internal/atomicfile), so that an
// existing file is never left half written.
func WriteNPZ(path string, arrays map[string]*Array) error {
	raw, err := encodeNPZ(arrays)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, raw)
}

// encodeNPZ returns the bytes of the .npz archive WriteNPZ writes.
func encodeNPZ(arrays map[string]*Array) ([]byte, error) {
	names := make([]string, 0, len(arrays))
	for name := range arrays {
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	w := npz.NewWriter(&buf)
	for _, name := range names {
		v, err := nested(arrays[name])
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", name, err)
		}
		if err := w.Write(name+".npy", v); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// nested returns the array as a value npyio writes with its shape: a float64
// or int64 for shape [], a slice for one dimension, and a Go array of arrays
// ([d0][d1]...T, fixed-size so that encoding/binary can write it) for more.
func nested(a *Array) (any, error) {
	var flat reflect.Value
	switch {
	case a.I != nil && a.DType == "<i8":
		flat = reflect.ValueOf(a.I)
	case a.F != nil && a.DType == "<f8":
		flat = reflect.ValueOf(a.F)
	default:
		return nil, fmt.Errorf("only float64 and int64 arrays are written, have dtype %q", a.DType)
	}
	for _, d := range a.Shape {
		if d < 0 {
			return nil, fmt.Errorf("shape %v has a negative dimension", a.Shape)
		}
	}
	if n := Elements(a.Shape); flat.Len() != n {
		return nil, fmt.Errorf("shape %v holds %d values, the data has %d", a.Shape, n, flat.Len())
	}
	switch len(a.Shape) {
	case 0:
		return flat.Index(0).Interface(), nil
	case 1:
		return flat.Interface(), nil
	}
	for _, d := range a.Shape {
		if d < 1 {
			return nil, fmt.Errorf("shape %v has an empty dimension, which npyio cannot write", a.Shape)
		}
	}
	t := flat.Type().Elem()
	for d := len(a.Shape) - 1; d >= 0; d-- {
		t = reflect.ArrayOf(a.Shape[d], t)
	}
	v := reflect.New(t).Elem()
	fill(v, flat)
	return v.Interface(), nil
}

// fill copies flat, in row-major order, into the nested array v.
func fill(v, flat reflect.Value) {
	if v.Type().Elem().Kind() != reflect.Array {
		reflect.Copy(v, flat)
		return
	}
	inner := flat.Len() / v.Len()
	for i := 0; i < v.Len(); i++ {
		fill(v.Index(i), flat.Slice(i*inner, (i+1)*inner))
	}
}
