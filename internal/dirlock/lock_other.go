//go:build !unix

package dirlock

import (
	"errors"
	"os"
)

// lockFile is not available here: without flock(2) a lock that a killed
// process leaves behind could not be told from a held one.
func lockFile(*os.File) error {
	return errors.New("directory locks need flock(2), which this system lacks")
}
