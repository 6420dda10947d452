//go:build !linux

package atomicfile

// exchange swaps the directories a and b with two renames.
func exchange(a, b string) error {
	return exchangeByRenames(a, b)
}
