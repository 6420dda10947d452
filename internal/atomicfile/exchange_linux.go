package atomicfile

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exchange swaps the directories a and b in one atomic rename, or, on a
// file system without renameat2's RENAME_EXCHANGE (EINVAL, as on NFS) or a
// kernel without renameat2 (ENOSYS), with two renames.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return exchangeByRenames(a, b)
	}
	return err
}
