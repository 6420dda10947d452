package train

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/modref/modref/internal/readfile"
)

// Text is a training text. The tokenizer is byte-level: token i of the text
// is its byte i, so any file is a text and generated ids are bytes.
type Text struct {
	// Name says where the text came from: a file path, or DefaultTextName.
	Name string
	// Bytes are the tokens.
	Bytes []byte
}

// TextInfo identifies a text in a checkpoint, so that a resumed run can
// check that it reads the same bytes.
type TextInfo struct {
	Name   string
	Bytes  int
	SHA256 string
}

// Info returns the text's name, length and SHA-256.
func (t Text) Info() TextInfo {
	sum := sha256.Sum256(t.Bytes)
	return TextInfo{Name: t.Name, Bytes: len(t.Bytes), SHA256: hex.EncodeToString(sum[:])}
}

// DefaultTextName names the default text: the Go language specification
// that every Go distribution ships, $GOROOT/doc/go_spec.html, read as raw
// bytes (HTML markup included). Go 1.26.8's is 293,469 bytes with SHA-256
// e5806989624c1e9dd32bddaedd2f70a1dd208295cb6d0ff72b02625b2cd6f592; other Go
// versions ship other revisions of it, so every run records the length and
// hash of the text it read (TextInfo).
const DefaultTextName = "$GOROOT/doc/go_spec.html"

// MinDefaultBytes is the smallest default text accepted: a Go
// distribution whose specification is shorter is not the one this package
// was written against (Go 1.26's is 293,469 bytes).
const MinDefaultBytes = 200_000

// DefaultText reads DefaultTextName, finding GOROOT with `go env GOROOT`.
func DefaultText() (Text, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return Text{}, fmt.Errorf("default text %s: finding GOROOT with `go env GOROOT`: %v; pass a text of your own", DefaultTextName, err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "doc", "go_spec.html")
	b, err := readfile.Read(path, maxDefaultBytes)
	if err != nil {
		return Text{}, fmt.Errorf("default text %s: %w", DefaultTextName, err)
	}
	if len(b) < MinDefaultBytes {
		return Text{}, fmt.Errorf("default text %s is %d bytes, want at least %d (the Go 1.26 specification is 293,469); pass a text of your own", path, len(b), MinDefaultBytes)
	}
	return Text{Name: DefaultTextName, Bytes: b}, nil
}

// MaxTextBytes bounds a training text: the whole text is held in memory,
// and a gigabyte is thousands of times the default text.
const MaxTextBytes = 1 << 30

// maxDefaultBytes bounds the default text: Go 1.26's is 293,469 bytes.
const maxDefaultBytes = 16 << 20

// ReadText reads a text from a file; a missing, unreadable or empty file,
// one that is not a regular file (a FIFO, /dev/zero) or one larger than
// MaxTextBytes is an error naming it.
func ReadText(path string) (Text, error) {
	b, err := readfile.Read(path, MaxTextBytes)
	if err != nil {
		return Text{}, fmt.Errorf("data file: %w", err)
	}
	if len(b) == 0 {
		return Text{}, fmt.Errorf("data file %s is empty", path)
	}
	return Text{Name: path, Bytes: b}, nil
}

// split returns the training and held-out parts of the text for cfg, or an
// error when either is too short for one sequence of SeqLen+1 bytes.
func split(t Text, cfg Config) (trainPart, evalPart []byte, err error) {
	n := len(t.Bytes)
	hold := int(float64(n) * cfg.HoldOut)
	need := cfg.SeqLen + 1
	if n-hold < need || hold < need {
		return nil, nil, fmt.Errorf("text %s has %d bytes; with HoldOut = %v and SeqLen = %d it needs at least %d bytes in each part (training %d, held out %d)",
			t.Name, n, cfg.HoldOut, cfg.SeqLen, need, n-hold, hold)
	}
	return t.Bytes[:n-hold], t.Bytes[n-hold:], nil
}
