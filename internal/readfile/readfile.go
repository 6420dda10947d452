// Package readfile is the one way modref reads a file named by a user: a
// flag, a corpus manifest, a candidate, a checkpoint or a training text.
// It opens only regular files (after symbolic links are followed), never
// blocks on a FIFO, and refuses a file larger than the bound the caller
// states for its kind of file before reading a byte of it, so that
// /dev/zero, a named pipe or a sparse 64 GiB file is one clear error, not a
// hang or an out-of-memory crash (docs/golden-format.md, "Reading
// untrusted files").
package readfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// The errors this package names; errors.Is tells them apart.
var (
	// ErrNotRegular: the path is a directory, device, FIFO or socket
	// (after symbolic links are followed).
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file is larger than its kind of file may be.
	ErrTooLarge = errors.New("too large")
)

// Open opens path for reading if it is a regular file of at most maxBytes,
// and returns it with its size. A FIFO is refused before it is opened
// (opening one blocks), and the opened file is checked again, since the
// path may have changed in between. Errors name the path.
func Open(path string, maxBytes int64) (*os.File, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", path, unwrapPath(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, Kind(fi.Mode()))
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", path, unwrapPath(err))
	}
	fi, err = f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w (%s)", ErrNotRegular, Kind(fi.Mode()))
	}
	if err == nil && fi.Size() > maxBytes {
		err = fmt.Errorf("%w: %d bytes, more than the %d accepted", ErrTooLarge, fi.Size(), maxBytes)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return f, fi.Size(), nil
}

// Read reads the whole of a regular file of at most maxBytes. A file that
// grows while it is read is read only up to maxBytes and its size at
// opening; one that shrinks is an error.
func Read(path string, maxBytes int64) ([]byte, error) {
	f, size, err := Open(path, maxBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw := make([]byte, size)
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return raw, nil
}

// Kind names the kind of file a mode describes, for messages: "a
// directory", "a FIFO", "a character device" and so on.
func Kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsRegular():
		return "a regular file"
	}
	return "mode " + m.String()
}

// unwrapPath drops the path that os errors repeat, since callers name it.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
