// Command modref is the command-line face of modref, the reference
// implementation and test oracle for Mixture-of-Depths transformers.
//
// Usage:
//
//	modref mlp [-steps N] [-seed S]
//
// mlp trains a tiny two-layer perceptron with the autograd engine on a
// synthetic task and prints its loss: a check that the engine learns. The
// oracle's own commands (check, diagnose, gen, list, explain) arrive with the
// golden corpus.
//
// Exit status: 0 on success, 2 on bad usage or input.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: modref <command> [flags]

commands:
  mlp    train a tiny MLP with the autograd engine and print its loss
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
	case "mlp":
		err = runMLP(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "modref: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "modref %s: %v\n", args[0], err)
		}
		return 2
	}
	return 0
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
