//go:build !linux

package atomicfile

import "os"

// exchange swaps the directories a and b with two renames through a third
// name: b is missing between them.
func exchange(a, b string) error {
	mid := a + ".old"
	if err := os.Rename(b, mid); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		os.Rename(mid, b)
		return err
	}
	return os.Rename(mid, a)
}
