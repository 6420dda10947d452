package golden

import (
	"embed"
	"io/fs"

	"github.com/modref/modref/golden/format"
)

// embedded holds the files of golden/corpus as this package was built, so
// that a program importing golden (and the installed modref command) carries
// the corpus wherever it runs.
//
//go:embed corpus/*.json corpus/*.npz
var embedded embed.FS

// Embedded returns the golden corpus this package was built with: the
// files of golden/corpus at its module version, compiled into the program.
func Embedded() format.Corpus {
	sub, err := fs.Sub(embedded, "corpus")
	if err != nil {
		panic("golden.Embedded: " + err.Error()) // "corpus" is a valid path
	}
	return format.Embedded(sub, DefaultDir)
}
