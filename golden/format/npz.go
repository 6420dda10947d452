package format

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

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
	raw, err := encodeNPZ(arrays, false)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, raw)
}

// storeAbove is the size in bytes of an array's .npy entry above which the
// entry is stored in the archive uncompressed: a case's float64 values are
// random bits that deflate hardly shrinks (the 155 MB of arrays of the
// d = 512, S = 2048 example deflate to 137 MB, mostly its padded rows'
// zeros) at 7 s of CPU, more than computing them took. Every array of the
// corpus is far below it (12.9 KB at most), so its entries stay deflated
// and its bytes what they were.
const storeAbove = 1 << 16

// encodeNPZ returns the bytes of the .npz archive WriteNPZ writes: a zip of
// NAME.npy entries in name order, each a version 2.0 .npy (the header
// sbinet/npyio writes, which the corpus was first written with) deflated,
// or stored when above storeAbove bytes or when store is set (a scratch
// case read once, `modref fuzz`).
func encodeNPZ(arrays map[string]*Array, store bool) ([]byte, error) {
	names := make([]string, 0, len(arrays))
	size := 0
	for name, a := range arrays {
		names = append(names, name)
		size += 8*(len(a.F)+len(a.I)) + 256
	}
	sort.Strings(names)
	var buf bytes.Buffer
	buf.Grow(size)
	w := zip.NewWriter(&buf)
	for _, name := range names {
		a := arrays[name]
		header, err := encodeHeader(a)
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", name, err)
		}
		method := zip.Deflate
		if store || len(header)+8*(len(a.F)+len(a.I)) > storeAbove {
			method = zip.Store
		}
		e, err := w.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: method})
		if err != nil {
			return nil, err
		}
		if _, err := e.Write(header); err != nil {
			return nil, err
		}
		if err := writeValues(e, a); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeHeader is the .npy version 2.0 header of a float64 or int64 array a:
// the magic string, the version, the header's length and its dictionary,
// padded with spaces as sbinet/npyio pads it, so that the corpus's bytes
// do not change. An array whose shape does not hold exactly its data is an
// error.
func encodeHeader(a *Array) ([]byte, error) {
	var n int
	switch {
	case a.I != nil && a.DType == "<i8":
		n = len(a.I)
	case a.F != nil && a.DType == "<f8":
		n = len(a.F)
	default:
		return nil, fmt.Errorf("only float64 and int64 arrays are written, have dtype %q", a.DType)
	}
	for _, d := range a.Shape {
		if d < 0 {
			return nil, fmt.Errorf("shape %v has a negative dimension", a.Shape)
		}
	}
	if m := Elements(a.Shape); n != m {
		return nil, fmt.Errorf("shape %v holds %d values, the data has %d", a.Shape, m, n)
	}
	var shape string
	switch len(a.Shape) {
	case 0:
		shape = "()"
	case 1:
		shape = fmt.Sprintf("(%d,)", a.Shape[0])
	default:
		for _, d := range a.Shape {
			if d < 1 {
				return nil, fmt.Errorf("shape %v has an empty dimension, which npyio cannot write", a.Shape)
			}
		}
		dims := make([]string, len(a.Shape))
		for i, d := range a.Shape {
			dims[i] = strconv.Itoa(d)
		}
		shape = "(" + strings.Join(dims, ", ") + ")"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", a.DType, shape)
	const prefix = 6 + 2 + 4 // magic, version, header length
	dict += strings.Repeat(" ", (prefix+len(dict)+1)%16) + "\n"
	h := append([]byte("\x93NUMPY\x02\x00"), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(dict)))
	return append(h, dict...), nil
}

// writeValues writes a's values little-endian, a block at a time.
func writeValues(w io.Writer, a *Array) error {
	var block [4096]byte
	n := len(a.F) + len(a.I)
	for start := 0; start < n; start += len(block) / 8 {
		end := min(start+len(block)/8, n)
		b := block[:0]
		for k := start; k < end; k++ {
			if a.I != nil {
				b = binary.LittleEndian.AppendUint64(b, uint64(a.I[k]))
			} else {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.F[k]))
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
