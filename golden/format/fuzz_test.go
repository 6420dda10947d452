package format

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"testing"
)

// bytesSource draws choices from fuzz bytes; an exhausted source reads
// zeros.
type bytesSource struct{ b []byte }

func (s *bytesSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

func (s *bytesSource) intn(n int) int { return int(s.byte()) % n }

// u64 draws 8 bytes: every int64 and every float64 bit pattern (NaN, ±Inf,
// subnormals, ±MaxFloat64, MinInt64, MaxInt64) is reachable.
func (s *bytesSource) u64() uint64 {
	var v [8]byte
	for i := range v {
		v[i] = s.byte()
	}
	return binary.LittleEndian.Uint64(v[:])
}

// npy returns an .npy entry with a header of the given version and extra
// padding (so that the data need not be aligned).
func npy(descr string, shape []int, data []byte, version byte, pad int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple) + strings.Repeat(" ", pad) + "\n"
	out := append([]byte("\x93NUMPY"), version, 0)
	if version == 1 {
		out = binary.LittleEndian.AppendUint16(out, uint16(len(h)))
	} else {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(h)))
	}
	return append(append(out, h...), data...)
}

// corruption is what genNPZ did to an archive it built.
type corruption int

const (
	intact corruption = iota
	truncated
	badCRC
	oversize
)

// genNPZ builds an archive from fuzz bytes: up to 4 arrays of any supported
// dtype, shapes of rank 0–3 with dimensions 0–5 (and, rarely, up to 2^31),
// values drawn over the full int64 and float64 ranges (float32 and int32 from
// the full 32 bits), stored or deflated, header versions 1–3 with any
// padding; then at most one corruption: data cut short, a wrong CRC-32, or a
// declared size larger than the data. It returns the archive, the arrays it
// holds and the corruption.
func genNPZ(s *bytesSource) ([]byte, map[string]*Array, corruption, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	want := map[string]*Array{}
	n := 1 + s.intn(4)
	corrupt := corruption(s.intn(8))
	if corrupt > oversize {
		corrupt = intact
	}
	victim := s.intn(n)
	for i := range n {
		dtype := []string{"<f8", "<f4", "<i8", "<i4"}[s.intn(4)]
		shape := make([]int, s.intn(4))
		for d := range shape {
			shape[d] = s.intn(6)
		}
		a := &Array{Shape: shape, DType: dtype}
		var data []byte
		for range Elements(shape) {
			v := s.u64()
			switch dtype {
			case "<f8":
				a.F = append(a.F, math.Float64frombits(v))
				data = binary.LittleEndian.AppendUint64(data, v)
			case "<f4":
				a.F = append(a.F, float64(math.Float32frombits(uint32(v))))
				data = binary.LittleEndian.AppendUint32(data, uint32(v))
			case "<i8":
				a.I = append(a.I, int64(v))
				data = binary.LittleEndian.AppendUint64(data, v)
			case "<i4":
				a.I = append(a.I, int64(int32(uint32(v))))
				data = binary.LittleEndian.AppendUint32(data, uint32(v))
			}
		}
		if dtype[1] == 'f' && a.F == nil {
			a.F = []float64{}
		} else if dtype[1] == 'i' && a.I == nil {
			a.I = []int64{}
		}
		raw := npy(dtype, shape, data, byte(1+s.intn(3)), s.intn(40))
		name := fmt.Sprintf("a%d", i)
		method := zip.Store
		if s.intn(2) == 1 {
			method = zip.Deflate
		}
		if i == victim && corrupt == truncated && len(data) == 0 {
			corrupt = intact // no data to cut
		}
		crc := crc32.ChecksumIEEE(raw)
		declared := uint64(len(raw))
		if i == victim {
			switch corrupt {
			case truncated:
				raw = raw[:len(raw)-1-s.intn(len(data))]
				crc = crc32.ChecksumIEEE(raw)
				declared = uint64(len(raw))
			case badCRC:
				crc ^= 1 << s.intn(32)
			case oversize:
				declared += 1 + uint64(s.u64()%(1<<40))
			}
		}
		body := raw
		if method == zip.Deflate {
			body = deflate(raw)
		}
		w, err := zw.CreateRaw(&zip.FileHeader{Name: name + ".npy", Method: method, CRC32: crc,
			CompressedSize64: uint64(len(body)), UncompressedSize64: declared})
		if err != nil {
			return nil, nil, 0, err
		}
		w.Write(body)
		want[name] = a
	}
	if err := zw.Close(); err != nil {
		return nil, nil, 0, err
	}
	return buf.Bytes(), want, corrupt, nil
}

// deflate returns the raw deflate stream of data, as a zip member holds it.
func deflate(data []byte) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "x", Method: zip.Deflate})
	w.Write(data)
	zw.Close()
	zr, _ := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	rc, _ := zr.File[0].OpenRaw()
	var out bytes.Buffer
	out.ReadFrom(rc)
	return out.Bytes()
}

// checkRead is the reader's contract on one archive: no panic (the fuzzer
// reports one), every array well formed, an intact archive read back bit
// for bit, and each corruption refused with its named error.
func checkRead(t *testing.T, raw []byte, want map[string]*Array, corrupt corruption) {
	got, err := readNPZ(bytes.NewReader(raw), int64(len(raw)), nil)
	if err == nil {
		for name, a := range got {
			if a.Len() != max(len(a.F), len(a.I)) || (a.F != nil) == (a.I != nil) {
				t.Fatalf("array %q: shape %v with %d floats and %d ints", name, a.Shape, len(a.F), len(a.I))
			}
		}
	}
	if want == nil {
		return
	}
	switch corrupt {
	case intact:
		if err != nil {
			t.Fatalf("an intact archive is refused: %v", err)
		}
		for name, w := range want {
			g := got[name]
			if g == nil || !slices.Equal(g.Shape, w.Shape) || g.DType != w.DType || !slices.Equal(g.I, w.I) ||
				!slices.EqualFunc(g.F, w.F, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
				t.Fatalf("array %q read back as %+v, written %+v", name, g, w)
			}
		}
	case truncated, oversize:
		if !errors.Is(err, ErrDataLength) && !errors.Is(err, ErrBadArchive) && !errors.Is(err, ErrBadNPY) {
			t.Fatalf("corruption %d: error %v, want a data length error", corrupt, err)
		}
	case badCRC:
		if !errors.Is(err, ErrBadCRC) {
			t.Fatalf("a flipped CRC-32 bit: error %v, want %v", err, ErrBadCRC)
		}
	}
}

// FuzzReadNPZ: the .npz reader on arbitrary bytes never panics and returns
// well-formed arrays or an error; on archives built from the bytes (full
// int64 and float64 ranges, truncation, bad CRCs, declared sizes larger than
// the data) it reads intact ones bit for bit and names each corruption.
func FuzzReadNPZ(f *testing.F) {
	f.Add(false, []byte("PK\x05\x06"+strings.Repeat("\x00", 18)))
	f.Add(true, []byte{})
	f.Add(true, []byte{3, 0, 0, 0, 2, 3, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, structured bool, data []byte) {
		if !structured {
			checkRead(t, data, nil, intact)
			return
		}
		raw, want, corrupt, err := genNPZ(&bytesSource{b: data})
		if err != nil {
			t.Fatal(err)
		}
		checkRead(t, raw, want, corrupt)
	})
}

// TestReadNPZGenerated runs FuzzReadNPZ's structured property on 2000
// pseudo-random inputs under go test, and fails unless every corruption
// was produced.
func TestReadNPZGenerated(t *testing.T) {
	seen := map[corruption]int{}
	x := uint64(1)
	for range 2000 {
		data := make([]byte, 200)
		for i := range data {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			data[i] = byte(x)
		}
		raw, want, corrupt, err := genNPZ(&bytesSource{b: data})
		if err != nil {
			t.Fatal(err)
		}
		seen[corrupt]++
		checkRead(t, raw, want, corrupt)
	}
	for c := intact; c <= oversize; c++ {
		if seen[c] == 0 {
			t.Errorf("the generator never produced corruption %d", c)
		}
	}
}
