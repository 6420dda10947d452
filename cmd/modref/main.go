// Command modref is the command-line face of modref, the reference
// implementation and test oracle for Mixture-of-Depths transformers.
//
// Usage:
//
//	modref check [-dir DIR] [--candidate FILE.npz|DIR] [--json] [--junit FILE] [--allow-missing] [CASE...]
//	modref diagnose [-dir DIR] --candidate FILE.npz CASE
//	modref list [-dir DIR]
//	modref explain [-dir DIR] CASE
//	modref gen [-dir DIR]
//	modref mlp [-steps N] [-seed S] [-lr LR]
//
// check compares a candidate implementation's arrays with the golden corpus
// (docs/golden-format.md), or, without a candidate, modref's own; list and
// explain describe the cases; gen regenerates the corpus from ref; mlp trains
// a tiny perceptron with the autograd engine and prints its loss.
//
// Exit status: 0 on success, 1 when check finds a mismatch, 2 on bad usage
// or input.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/modref/modref/internal/atomicfile"
)

func main() {
	atomicfile.HandleSignals()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: modref <command> [flags]

commands:
  check     compare a candidate (or modref itself) with the golden corpus
  diagnose  name the deviation of SPEC.md section 11 a failing candidate matches
  list      list the corpus's cases
  explain   show a case's configuration, equations and what it catches
  gen       regenerate the corpus from ref
  mlp       train a tiny MLP with the autograd engine and print its loss

Run modref <command> -h for a command's flags.
`

// errUsage marks errors that come from how the command was called.
var errUsage = errors.New("usage")

// run executes one command and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
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
	case "mlp":
		err = runMLP(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "modref: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errMismatch):
		return 1
	case !errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "modref %s: %v\n", args[0], err)
	}
	return 2
}

// parseFlags parses a command's flags, reporting errors as usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return errUsage
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
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			return names, nil
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
