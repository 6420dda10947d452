package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
)

// errHelp marks a command called with -h or --help: its usage went to
// stdout, and the exit status is 0.
var errHelp = errors.New("help requested")

// flagSet is a command's flags. Errors in them go to stderr with the
// command's usage; -h and --help print the usage to stdout.
type flagSet struct {
	*flag.FlagSet
	stdout, stderr io.Writer
}

// newFlagSet returns the flags of command name, with a plain usage message
// that a command replaces by setting Usage (which writes to Output()).
func newFlagSet(name string, stdout, stderr io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: modref %s [flags]\n\nflags:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// describe sets the usage message of a command: its synopsis (the words
// after "modref"), what it does, and its flags.
func (fs *flagSet) describe(synopsis, what string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: modref %s\n\n%s\n\nflags:\n", synopsis, what)
		fs.PrintDefaults()
	}
}

// parse parses args, returning errHelp for -h or --help and errUsage for a
// flag error (the flag package has then named it on stderr).
func (fs *flagSet) parse(args []string) error {
	usage := fs.Usage
	fs.Usage = func() {} // printed below, where it belongs
	err := fs.FlagSet.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(fs.stdout)
		fs.Usage()
		fs.SetOutput(fs.stderr)
		return errHelp
	case err != nil:
		fs.Usage()
		return errUsage
	}
	return nil
}

// corpusFlag adds --corpus DIR (and its older name -dir) to fs and returns
// the corpus the flags choose: DIR, or without them the embedded corpus.
func corpusFlag(fs *flagSet) func() format.Corpus {
	dir := new(string)
	set := func(s string) error {
		if s == "" {
			return errors.New("want a directory")
		}
		*dir = s
		return nil
	}
	fs.Func("corpus", "read the cases from corpus directory `DIR` instead of the corpus built into modref", set)
	fs.Func("dir", "the same as --corpus `DIR`", set)
	return func() format.Corpus {
		if *dir == "" {
			return golden.Embedded()
		}
		return format.Dir(*dir)
	}
}
