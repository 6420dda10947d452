package golden

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/sbinet/npyio/npy"
	"github.com/sbinet/npyio/npz"
)

// maxArrayBytes bounds the size of one array a reader accepts, so that a
// corrupt header cannot make it allocate without limit. The whole corpus is a
// few megabytes.
const maxArrayBytes = 1 << 30

// ReadNPZ reads every array of an .npz file. It accepts little-endian
// float64, float32, int64 and int32 arrays in C order, and returns one error
// naming the file and the array for anything else: a file that is missing,
// truncated or not a zip archive, an entry that is not a valid .npy, another
// dtype, a Fortran-ordered array. It never panics.
func ReadNPZ(path string) (map[string]*Array, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, unwrapPath(err))
	}
	arrays, err := decodeNPZ(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return arrays, nil
}

// unwrapPath drops the path that os errors repeat, since callers name it.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// decodeNPZ decodes an in-memory .npz archive.
func decodeNPZ(raw []byte) (arrays map[string]*Array, err error) {
	// npyio is not written for hostile input; a panic inside it is a corrupt
	// file, reported as such.
	defer func() {
		if r := recover(); r != nil {
			arrays, err = nil, fmt.Errorf("corrupt .npz data (%v)", r)
		}
	}()
	if err := checkHeaders(raw); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return nil, fmt.Errorf("not a readable .npz archive: %w", err)
	}
	arrays = make(map[string]*Array)
	for _, f := range zr.File {
		// numpy stores array "x" as the zip entry "x.npy"; numpy.load
		// strips the suffix, and so does this reader.
		name := strings.TrimSuffix(f.Name, ".npy")
		a, err := readEntry(f)
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", name, err)
		}
		if _, dup := arrays[name]; dup {
			return nil, fmt.Errorf("array %q is stored twice", name)
		}
		arrays[name] = a
	}
	return arrays, nil
}

// maxHeaderBytes bounds the length an .npy header may declare; numpy writes
// headers of a few hundred bytes, and npyio allocates whatever is declared.
const maxHeaderBytes = 1 << 16

// checkHeaders refuses an archive with an .npy entry whose header declares
// more than maxHeaderBytes, before npyio would allocate it.
func checkHeaders(raw []byte) error {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return fmt.Errorf("not a readable .npz archive: %w", err)
	}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("array %q: %w", strings.TrimSuffix(f.Name, ".npy"), err)
		}
		var h [12]byte
		n, _ := io.ReadFull(rc, h[:])
		rc.Close()
		if n < 10 || string(h[:6]) != "\x93NUMPY" {
			return fmt.Errorf("array %q: not an .npy entry (no \\x93NUMPY magic)", strings.TrimSuffix(f.Name, ".npy"))
		}
		size := uint64(binary.LittleEndian.Uint16(h[8:10]))
		if h[6] >= 2 && n == 12 {
			size = uint64(binary.LittleEndian.Uint32(h[8:12]))
		}
		if size > maxHeaderBytes {
			return fmt.Errorf("array %q: its .npy header declares %d bytes, more than the %d accepted", strings.TrimSuffix(f.Name, ".npy"), size, maxHeaderBytes)
		}
	}
	return nil
}

// readEntry reads one .npy entry of an archive. The entry is read whole
// first and decoded from memory: npyio reads values with single Read calls
// and does not retry a short read, which a deflated zip entry returns at
// its 32 KiB window boundaries, so decoding straight from the entry would
// garble every larger array of a compressed archive (np.savez_compressed,
// npyio's own writer).
func readEntry(f *zip.File) (*Array, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxArrayBytes+maxHeaderBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxArrayBytes+maxHeaderBytes {
		return nil, fmt.Errorf("more than %d bytes", maxArrayBytes+maxHeaderBytes)
	}
	rd, err := npy.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not a valid .npy entry: %w", err)
	}
	return readArray(rd)
}

func readArray(rd *npy.Reader) (*Array, error) {
	hdr := &rd.Header
	if hdr.Descr.Fortran {
		return nil, fmt.Errorf("stored in Fortran order; write it in C order (numpy.ascontiguousarray)")
	}
	shape := append([]int{}, hdr.Descr.Shape...)
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > maxArrayBytes/8/d) {
			return nil, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	a := &Array{Shape: shape, DType: hdr.Descr.Type}
	var err error
	switch hdr.Descr.Type {
	case "<f8":
		err = rd.Read(&a.F)
	case "<f4":
		var v []float32
		if err = rd.Read(&v); err == nil {
			a.F = make([]float64, len(v))
			for i, x := range v {
				a.F[i] = float64(x)
			}
		}
	case "<i8":
		err = rd.Read(&a.I)
	case "<i4":
		var v []int32
		if err = rd.Read(&v); err == nil {
			a.I = make([]int64, len(v))
			for i, x := range v {
				a.I[i] = int64(x)
			}
		}
	default:
		return nil, fmt.Errorf("dtype %q is not supported; use float64 (<f8), float32 (<f4), int64 (<i8) or int32 (<i4)", hdr.Descr.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s data: %w", hdr.Descr.Type, err)
	}
	if got := max(len(a.F), len(a.I)); got != n {
		return nil, fmt.Errorf("shape %v needs %d values, the data holds %d", shape, n, got)
	}
	return a, nil
}

// WriteNPZ writes arrays to path as an .npz archive that numpy.load reads,
// entries in name order. It writes to a temporary file in the same directory
// and renames it into place, so that an existing file is never left half
// written.
func WriteNPZ(path string, arrays map[string]*Array) error {
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
			return fmt.Errorf("writing %s: array %q: %w", path, name, err)
		}
		if err := w.Write(name+".npy", v); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return writeFileAtomic(path, buf.Bytes())
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

// writeFileAtomic writes data to a temporary file beside path and renames it
// to path.
func writeFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+strings.TrimPrefix(base, ".")+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, werr)
	}
	return nil
}
