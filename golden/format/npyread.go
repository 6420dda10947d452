package format

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/modref/modref/internal/readfile"
)

// The errors a reader names. Each message of ReadNPZ, ReadCandidate and Load
// wraps one of them, so that errors.Is tells the classes apart.
var (
	// ErrNotRegular: the path is a directory, device, FIFO or socket
	// (after symbolic links are followed).
	ErrNotRegular = readfile.ErrNotRegular
	// ErrTooLarge: a file, an archive's member count or central directory,
	// an .npy header, or an array is larger than the reader accepts.
	ErrTooLarge = readfile.ErrTooLarge
	// ErrBadCRC: a zip member's bytes do not match its CRC-32.
	ErrBadCRC = errors.New("bad CRC-32")
	// ErrDataLength: an array's data is not exactly as long as its .npy
	// header's shape and dtype declare.
	ErrDataLength = errors.New("data length does not match the header")
	// ErrBadNPY: a member is not a valid .npy entry.
	ErrBadNPY = errors.New("invalid .npy entry")
	// ErrBadArchive: the file is not a readable zip archive.
	ErrBadArchive = errors.New("not a readable .npz archive")
)

// Reader bounds (docs/golden-format.md, "Reading untrusted files").
const (
	// MaxFileBytes bounds any .npz file a reader opens: the float64 values
	// of a case of MaxCaseElements (4 GiB) and 64 MiB for the archive's
	// headers; the corpus's largest is under 100 KB.
	MaxFileBytes = 8*MaxCaseElements + 64<<20
	// MaxManifestBytes bounds a manifest file.
	MaxManifestBytes = 1 << 20
	// maxMembers bounds the members of an archive; the largest case has
	// under 100 arrays.
	maxMembers = 4096
	// maxDirectoryBytes bounds the central directory (and anything after
	// it), which archive/zip turns into one record per entry.
	maxDirectoryBytes = 1 << 20
	// maxHeaderBytes bounds the length an .npy header may declare; numpy
	// writes headers of a few hundred bytes.
	maxHeaderBytes = 1 << 16
	// maxArrayBytes bounds the decoded data of ReadNPZ, which knows no
	// case: 8 bytes per element.
	maxArrayBytes = 1 << 30
	// maxSkipBytes bounds the declared sizes, together, of the members a
	// candidate holds beyond the arrays its case judges, which are only
	// streamed through the CRC-32 check: it bounds the time they take.
	maxSkipBytes = 64 << 20
)

// readPlan says which arrays of an archive a reader decodes and how many
// elements each may hold. A nil plan decodes every array, together at most
// maxArrayBytes.
type readPlan struct {
	// arrays maps an array name to the most elements it may hold.
	arrays map[string]int
	// refuseOthers makes an array not in arrays an error; otherwise it is
	// skipped: its bytes are streamed through the CRC-32 check, never
	// decoded or kept.
	refuseOthers bool
	// what names the other side in messages ("the manifest", "the case").
	what string
	// unkept names the arrays checked as the others are (header, dtype,
	// shape, length, CRC-32, and every float value finite) but not kept:
	// decoded a chunk at a time into a fixed buffer, and returned with
	// their shape and dtype and no values.
	unkept map[string]bool
}

// readNPZFile reads the arrays of the .npz at path as plan says.
func readNPZFile(path string, plan *readPlan) (map[string]*Array, error) {
	f, size, err := readfile.Open(path, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	arrays, err := readNPZ(f, size, plan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return arrays, nil
}

// readNPZ reads an archive of the given size: one pass over its members,
// each decoded (or skipped) once, so time is linear in the members and the
// bytes read, and memory is the decoded arrays plus buffers of fixed size.
func readNPZ(r io.ReaderAt, size int64, plan *readPlan) (map[string]*Array, error) {
	if err := checkDirectory(r, size); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	if len(zr.File) > maxMembers {
		return nil, fmt.Errorf("%w: %d members, more than the %d accepted", ErrTooLarge, len(zr.File), maxMembers)
	}
	arrays := make(map[string]*Array, len(zr.File))
	budget := int64(maxArrayBytes / 8)
	skipped := uint64(0)
	for _, zf := range zr.File {
		// numpy stores array "x" as the member "x.npy"; numpy.load strips
		// the suffix, and so does this reader.
		name := strings.TrimSuffix(zf.Name, ".npy")
		if _, dup := arrays[name]; dup {
			return nil, fmt.Errorf("array %q is stored twice", name)
		}
		limit := int(budget)
		if plan != nil {
			n, ok := plan.arrays[name]
			switch {
			case !ok && plan.refuseOthers:
				return nil, fmt.Errorf("array %q is not listed in %s", name, plan.what)
			case !ok:
				if skipped += zf.UncompressedSize64; skipped > maxSkipBytes || zf.UncompressedSize64 > maxSkipBytes {
					return nil, fmt.Errorf("%w: the arrays %s does not judge declare more than %d bytes together (array %q)", ErrTooLarge, plan.what, maxSkipBytes, name)
				}
				if err := skipMember(zf); err != nil {
					return nil, fmt.Errorf("array %q (not judged, checked and skipped): %w", name, err)
				}
				arrays[name] = nil
				continue
			}
			limit = n
		}
		a, err := readMember(zf, limit, plan, plan == nil || !plan.unkept[name])
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", name, err)
		}
		budget -= int64(a.Len())
		arrays[name] = a
	}
	for name, a := range arrays {
		if a == nil {
			delete(arrays, name)
		}
	}
	return arrays, nil
}

// skipMember streams a member through archive/zip's CRC-32 and length
// checks with a fixed buffer, keeping nothing.
func skipMember(zf *zip.File) error {
	rc, err := openMember(zf)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return memberError(err)
	}
	return nil
}

// crcReader checks, at the end of a member, the CRC-32 of every byte read
// against the member's. archive/zip does too, but skips the check when the
// stored CRC-32 is 0, which numpy (Python's zipfile) reports as a bad CRC
// for any non-empty member: crcReader computes it only then, and leaves
// any other member's check to archive/zip (the CRC-32, computed by both,
// took 8 % of `modref check` at production shapes).
type crcReader struct {
	rc  io.ReadCloser
	zf  *zip.File
	crc uint32
}

func openMember(zf *zip.File) (*crcReader, error) {
	rc, err := zf.Open()
	if err != nil {
		return nil, memberError(err)
	}
	return &crcReader{rc: rc, zf: zf}, nil
}

func (r *crcReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if r.zf.CRC32 != 0 {
		return n, err // archive/zip checks it
	}
	r.crc = crc32.Update(r.crc, crc32.IEEETable, p[:n])
	if err == io.EOF && r.crc != r.zf.CRC32 {
		return n, zip.ErrChecksum
	}
	return n, err
}

func (r *crcReader) Close() error { return r.rc.Close() }

// memberError names the class of an error archive/zip returns for a member.
func memberError(err error) error {
	switch {
	case errors.Is(err, zip.ErrChecksum):
		return fmt.Errorf("%w: the stored bytes are not those the archive was written with", ErrBadCRC)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the member ends before the length its zip entry declares (truncated)", ErrDataLength)
	case errors.Is(err, zip.ErrFormat), errors.Is(err, zip.ErrAlgorithm):
		return fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	return fmt.Errorf("%w: %v", ErrBadArchive, err)
}

// checkDirectory reads the end-of-central-directory record (and its zip64
// form) and refuses an archive declaring more than maxMembers members or
// whose central directory and what follows it exceed maxDirectoryBytes,
// before archive/zip allocates a record for each entry it finds there. An
// archive it cannot parse is left to archive/zip to refuse.
func checkDirectory(r io.ReaderAt, size int64) error {
	const eocdLen = 22
	tail := min(size, eocdLen+65535)
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && err != io.EOF {
		return fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	at := -1
	for i := len(buf) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) == 0x06054b50 {
			at = i
			break
		}
	}
	if at < 0 {
		return nil
	}
	e := buf[at:]
	count := uint64(binary.LittleEndian.Uint16(e[10:]))
	offset := uint64(binary.LittleEndian.Uint32(e[16:]))
	if count == 0xffff || binary.LittleEndian.Uint32(e[12:]) == 0xffffffff || offset == 0xffffffff {
		// zip64: the locator sits just before the record.
		loc := size - tail + int64(at) - 20
		var l [20]byte
		if loc < 0 {
			return nil
		}
		if _, err := r.ReadAt(l[:], loc); err != nil || binary.LittleEndian.Uint32(l[:]) != 0x07064b50 {
			return nil
		}
		var z [56]byte
		zoff := binary.LittleEndian.Uint64(l[8:])
		if zoff > uint64(size) {
			return nil
		}
		if _, err := r.ReadAt(z[:], int64(zoff)); err != nil || binary.LittleEndian.Uint32(z[:]) != 0x06064b50 {
			return nil
		}
		count, offset = binary.LittleEndian.Uint64(z[32:]), binary.LittleEndian.Uint64(z[48:])
	}
	if count > maxMembers {
		return fmt.Errorf("%w: the archive declares %d members, more than the %d accepted", ErrTooLarge, count, maxMembers)
	}
	if offset < uint64(size) && uint64(size)-offset > maxDirectoryBytes+eocdLen+65535+76 {
		return fmt.Errorf("%w: the central directory and what follows it take %d bytes, more than the %d accepted", ErrTooLarge, uint64(size)-offset, maxDirectoryBytes)
	}
	return nil
}

// readMember decodes one .npy member holding at most maxElems elements. It
// checks the member's declared size against the header before allocating,
// reads exactly that many bytes, and reads on to the end so that
// archive/zip verifies the length and the CRC-32. Unless keep, it returns
// the array without its values, decoded a chunk at a time and checked to
// be finite (checkFinite).
func readMember(zf *zip.File, maxElems int, plan *readPlan, keep bool) (*Array, error) {
	rc, err := openMember(zf)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var pre [12]byte
	if n, err := io.ReadFull(rc, pre[:10]); err != nil {
		return nil, fmt.Errorf("%w: %d bytes, too short for an .npy preamble (\\x93NUMPY, version, header length)", ErrBadNPY, n)
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("%w: no \\x93NUMPY magic at its start", ErrBadNPY)
	}
	var hlen uint64
	prefix := uint64(10)
	switch pre[6] {
	case 1:
		hlen = uint64(binary.LittleEndian.Uint16(pre[8:]))
	case 2, 3:
		if _, err := io.ReadFull(rc, pre[10:12]); err != nil {
			return nil, fmt.Errorf("%w: the preamble ends early", ErrBadNPY)
		}
		hlen, prefix = uint64(binary.LittleEndian.Uint32(pre[8:])), 12
	default:
		return nil, fmt.Errorf("%w: format version %d.%d (numpy writes 1.0, 2.0 and 3.0)", ErrBadNPY, pre[6], pre[7])
	}
	if hlen > maxHeaderBytes {
		return nil, fmt.Errorf("%w: its .npy header declares %d bytes, more than the %d accepted", ErrTooLarge, hlen, maxHeaderBytes)
	}
	if prefix+hlen > zf.UncompressedSize64 {
		return nil, fmt.Errorf("%w: its .npy header declares %d bytes, the member holds %d", ErrDataLength, hlen, zf.UncompressedSize64)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(rc, hdr); err != nil {
		return nil, memberError(err)
	}
	h, err := parseHeader(string(hdr))
	if err != nil {
		return nil, fmt.Errorf("%w: header %q: %v", ErrBadNPY, clip(string(hdr), 120), err)
	}
	var item uint64
	switch h.descr {
	case "<f8", "<i8":
		item = 8
	case "<f4", "<i4":
		item = 4
	default:
		return nil, fmt.Errorf("dtype %q is not supported; use float64 (<f8), float32 (<f4), int64 (<i8) or int32 (<i4)", h.descr)
	}
	if h.fortran {
		return nil, fmt.Errorf("stored in Fortran order; write it in C order (numpy.ascontiguousarray)")
	}
	n := uint64(1)
	for _, d := range h.shape {
		if d > 0 && n > uint64(maxElems)/uint64(d) {
			n = uint64(maxElems) + 1
			break
		}
		n *= uint64(d)
	}
	if n > uint64(maxElems) {
		if plan != nil {
			return nil, fmt.Errorf("%w: shape %v holds more than the %d values %s allows for it", ErrTooLarge, h.shape, maxElems, plan.what)
		}
		return nil, fmt.Errorf("%w: shape %v holds more than the %d values accepted", ErrTooLarge, h.shape, maxElems)
	}
	if want := prefix + hlen + n*item; zf.UncompressedSize64 != want {
		return nil, fmt.Errorf("%w: shape %v of %s needs %d bytes of data, the member holds %d", ErrDataLength,
			h.shape, h.descr, n*item, int64(zf.UncompressedSize64)-int64(prefix+hlen))
	}
	a := &Array{Shape: h.shape, DType: h.descr}
	switch {
	case !keep:
		err = checkFinite(rc, a, int(n), int(item))
	case h.descr[1] == 'f':
		a.F = make([]float64, n)
		err = decodeData(rc, a, int(item))
	default:
		a.I = make([]int64, n)
		err = decodeData(rc, a, int(item))
	}
	if err != nil {
		return nil, err
	}
	// Reading to the end makes archive/zip check the length and CRC-32.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return nil, memberError(err)
	}
	return a, nil
}

// decodeData reads a's elements, little-endian of the given width, in
// chunks of a fixed buffer (io.ReadFull: short reads from a decompressor are
// completed, never padded).
func decodeData(r io.Reader, a *Array, item int) error {
	var buf [32 << 10]byte
	n := max(len(a.F), len(a.I))
	for k := 0; k < n; {
		m := min(n-k, len(buf)/item)
		b := buf[:m*item]
		if _, err := io.ReadFull(r, b); err != nil {
			return memberError(err)
		}
		// One loop per type, the type's switch outside it.
		switch a.DType {
		case "<f8":
			for j := range a.F[k : k+m] {
				a.F[k+j] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*j:]))
			}
		case "<f4":
			for j := range a.F[k : k+m] {
				a.F[k+j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:])))
			}
		case "<i8":
			for j := range a.I[k : k+m] {
				a.I[k+j] = int64(binary.LittleEndian.Uint64(b[8*j:]))
			}
		case "<i4":
			for j := range a.I[k : k+m] {
				a.I[k+j] = int64(int32(binary.LittleEndian.Uint32(b[4*j:])))
			}
		}
		k += m
	}
	return nil
}

// checkFinite reads the n elements of a (its shape and dtype set, no
// values) as decodeData does, a chunk at a time, keeping none, and refuses
// the first NaN or infinite float value with its index.
func checkFinite(r io.Reader, a *Array, n, item int) error {
	const chunk = 4096
	part := &Array{DType: a.DType}
	if a.DType[1] == 'f' {
		part.F = make([]float64, chunk)
	} else {
		part.I = make([]int64, chunk)
	}
	for k := 0; k < n; k += chunk {
		m := min(chunk, n-k)
		if part.F != nil {
			part.F = part.F[:m]
		} else {
			part.I = part.I[:m]
		}
		if err := decodeData(r, part, item); err != nil {
			return err
		}
		if j := part.FirstNonFinite(); j >= 0 {
			return fmt.Errorf("holds %v at %v", part.F[j], a.Index(k+j))
		}
	}
	return nil
}

// npyHeader is the dictionary of an .npy header.
type npyHeader struct {
	descr   string
	fortran bool
	shape   []int
}

// parseHeader parses an .npy header: the Python literal
// {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces and a newline. It accepts exactly the three keys, each once.
func parseHeader(s string) (npyHeader, error) {
	var h npyHeader
	p := &lit{s: strings.TrimRight(s, " \n\x00")}
	if !p.eat("{") {
		return h, errors.New("does not start with '{'")
	}
	seen := map[string]bool{}
	for !p.eat("}") {
		key, err := p.str()
		if err != nil {
			return h, err
		}
		if seen[key] {
			return h, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		if !p.eat(":") {
			return h, fmt.Errorf("no ':' after key %q", key)
		}
		switch key {
		case "descr":
			if h.descr, err = p.str(); err != nil {
				return h, fmt.Errorf("descr: %v", err)
			}
		case "fortran_order":
			switch {
			case p.eat("False"):
			case p.eat("True"):
				h.fortran = true
			default:
				return h, errors.New("fortran_order is neither True nor False")
			}
		case "shape":
			if h.shape, err = p.tuple(); err != nil {
				return h, fmt.Errorf("shape: %v", err)
			}
		default:
			return h, fmt.Errorf("unknown key %q", key)
		}
		if !p.eat(",") && !p.peek("}") {
			return h, fmt.Errorf("no ',' or '}' after %q", key)
		}
	}
	if p.skip(); p.i != len(p.s) {
		return h, errors.New("text after the closing '}'")
	}
	if len(seen) != 3 {
		return h, errors.New("want the keys descr, fortran_order and shape")
	}
	return h, nil
}

// lit scans a Python literal.
type lit struct {
	s string
	i int
}

func (p *lit) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *lit) peek(tok string) bool { p.skip(); return strings.HasPrefix(p.s[p.i:], tok) }

func (p *lit) eat(tok string) bool {
	if p.peek(tok) {
		p.i += len(tok)
		return true
	}
	return false
}

// str reads a quoted string without escapes.
func (p *lit) str() (string, error) {
	p.skip()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", errors.New("want a quoted string")
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", errors.New("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsRune(v, '\\') {
		return "", errors.New("escapes are not supported")
	}
	p.i += end + 2
	return v, nil
}

// tuple reads a tuple of non-negative integers: (), (3,), (2, 3).
func (p *lit) tuple() ([]int, error) {
	if !p.eat("(") {
		return nil, errors.New("want a tuple")
	}
	shape := []int{}
	for !p.eat(")") {
		p.skip()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		d, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil || d > math.MaxInt32 {
			return nil, fmt.Errorf("want non-negative dimensions below 2^31, have %q", clip(p.s[p.i:], 20))
		}
		p.i = j
		shape = append(shape, int(d))
		if len(shape) > 32 {
			return nil, errors.New("more than 32 dimensions")
		}
		if !p.eat(",") && !p.peek(")") {
			return nil, errors.New("no ',' or ')' after a dimension")
		}
	}
	return shape, nil
}

// clip shortens s for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
