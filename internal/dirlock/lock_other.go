//go:build !unix

package dirlock

import "os"

// lockFile is not available here: without flock(2) a lock that a killed
// process leaves behind could not be told from a held one.
func lockFile(*os.File) error {
	return ErrUnsupported
}
