// Command modref is the command-line face of modref, the reference
// implementation and test oracle for Mixture-of-Depths transformers.
//
// Usage:
//
//	modref check [--corpus DIR] [--candidate FILE.npz|DIR [--present]] [--json] [--junit FILE] [--allow-missing] [CASE...]
//	modref diagnose [--corpus DIR] --candidate FILE.npz CASE
//	modref list [--corpus DIR]
//	modref explain [--corpus DIR] CASE
//	modref gen [--out DIR]
//	modref fuzz --exec CMD [--seed N] [--cases N | --time D] [--shard i/n] [flags]
//	modref mlp [-steps N] [-seed S] [-lr LR]
//	modref train [--out DIR] [--data FILE] [--resume] [flags]
//	modref sample --checkpoint DIR [--prompt TEXT] [flags]
//
// check compares a candidate implementation's arrays with the golden corpus
// (docs/golden-format.md), or, without a candidate, modref's own; list and
// explain describe the cases; gen regenerates the corpus from ref; mlp trains
// a tiny perceptron with the autograd engine and prints its loss; train
// trains a byte-level MoD language model on a text and writes a run
// directory (checkpoint, metrics, and pictures in a build with
// -tags pictures); sample generates text from it with causal routing.
//
// The corpus is built into the command (package golden embeds it), so modref
// runs from any directory once installed with go install ./cmd/modref from
// a clone (the module path is not published yet; README.md); --corpus DIR (or
// -dir DIR) reads a corpus of one's own instead. -h or --help after any
// command prints its usage.
//
// Exit status: 0 on success, 1 when check finds a mismatch, 2 on bad usage
// or input, 130 when train or sample is interrupted (after saving train's
// checkpoint, or printing the text sampled so far).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/internal/atomicfile"
)

func main() {
	// train and sample handle SIGINT and SIGTERM themselves: train saves a
	// checkpoint, sample prints the text made so far, and both exit 130.
	// The other commands remove the temporary files they are writing and
	// exit.
	if len(os.Args) < 2 || (os.Args[1] != "train" && os.Args[1] != "sample") {
		atomicfile.HandleSignals()
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: modref <command> [flags]

commands:
  check     compare a candidate (or modref itself) with the golden corpus
  diagnose  name the deviation of docs/spec.md §11 a failing candidate matches
  list      list the corpus's cases
  explain   show a case's configuration, equations and what it catches
  gen       regenerate the corpus from ref and write it to a directory
  fuzz      draw cases, run your implementation on them, shrink a failure
  mlp       train a tiny MLP with the autograd engine and print its loss
  train     train a byte-level MoD language model (checkpoint, metrics, pictures)
  sample    generate text from a trained model with causal routing

The cases come from the corpus built into modref; --corpus DIR reads
another. Run modref help <command> (or modref <command> -h) for a
command's flags.
`

// errUsage marks errors that come from how the command was called.
var errUsage = errors.New("usage")

// run executes one command and returns the process exit status. With
// --json, an error that ends the command before it has printed anything
// (bad usage, an unreadable corpus) is also printed on stdout as a JSON
// object, so that a harness that parses stdout sees why (jsonError).
func run(args []string, stdout, stderr io.Writer) int {
	if !wantsJSON(args) {
		return runCommand(args, stdout, stderr)
	}
	out := &countingWriter{w: stdout}
	var msg bytes.Buffer
	code := runCommand(args, out, io.MultiWriter(stderr, &msg))
	if code == 2 && out.n == 0 {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(jsonError{Error: strings.TrimSpace(msg.String()), ExitStatus: code})
	}
	return code
}

// jsonError is what --json prints on stdout for an error that ends a
// command before its results: the message printed on stderr, and the exit
// status.
type jsonError struct {
	Error      string `json:"error"`
	ExitStatus int    `json:"exit_status"`
}

// wantsJSON reports whether args ask for JSON output (--json or -json,
// alone or =true), wherever the flag stands.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// runCommand executes one command and returns the process exit status.
func runCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "check":
		err = runCheck(args[1:], stdout, stderr)
	case "diagnose":
		err = runDiagnose(args[1:], stdout, stderr)
	case "list":
		err = runList(args[1:], stdout, stderr)
	case "explain":
		err = runExplain(args[1:], stdout, stderr)
	case "gen":
		err = runGen(args[1:], stdout, stderr)
	case "fuzz":
		err = runFuzz(args[1:], stdout, stderr)
	case "mlp":
		err = runMLP(args[1:], stdout, stderr)
	case "train":
		err = runTrain(args[1:], stdout, stderr)
	case "sample":
		err = runSample(args[1:], stdout, stderr)
	case "help":
		if len(args) == 2 && args[1] != "help" {
			return runCommand([]string{args[1], "-h"}, stdout, stderr) // modref help CMD
		}
		fmt.Fprint(stdout, usage)
		return 0
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "modref: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errMismatch):
		return 1
	case errors.Is(err, errInterrupted):
		return 130
	case errors.Is(err, errReported):
	case errors.Is(err, format.ErrUnknownCase):
		fmt.Fprintf(stderr, "modref %s: %v\n(modref list names every case)\n", args[0], err)
	case !errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "modref %s: %v\n", args[0], err)
	}
	return 2
}

// parseFlags parses a command's flags, reporting errors as usage errors.
func parseFlags(fs *flagSet, args []string) error {
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "modref %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

// parseInterleaved parses a command's flags wherever they stand among its
// arguments (modref check CASE --candidate FILE as well as the other order)
// and returns the arguments that are not flags, in order.
func parseInterleaved(fs *flagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return names, nil
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
