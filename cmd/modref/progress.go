package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// progressLine returns a progress callback that keeps one line on stderr up
// to date, "label done/total", and erases it when done reaches total; or nil
// when stderr is not a terminal, so that logs and pipes get none of it.
// golang.org/x/term tells a terminal from a file, pipe or /dev/null
// portably (the standard library cannot); a counter is all a few seconds'
// wait needs, so no progress-bar library.
func progressLine(stderr io.Writer, label string) func(done, total int) {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return drawProgress(f, label)
}

// drawProgress is progressLine's callback, writing to w.
func drawProgress(w io.Writer, label string) func(done, total int) {
	return func(done, total int) {
		if done >= total {
			fmt.Fprint(w, "\r\x1b[K") // carriage return, erase to the end of the line
			return
		}
		fmt.Fprintf(w, "\r%s %d/%d", label, done, total)
	}
}
