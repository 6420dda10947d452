package format

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// pythonWithNumPy returns the Python that tests run NumPy with: the one
// $MODREF_PYTHON names, or else python3 on PATH. It skips the test, saying
// which interpreter it tried, when that one cannot import numpy.
func pythonWithNumPy(t *testing.T) string {
	t.Helper()
	python, from := os.Getenv("MODREF_PYTHON"), "$MODREF_PYTHON"
	if python == "" {
		python, from = "python3", "python3 on PATH"
	}
	if out, err := exec.Command(python, "-c", "import numpy").CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Skipf("requires Python with NumPy: %s (%s) cannot import numpy (%v: %s); install python3-numpy or set MODREF_PYTHON to a Python that has it",
			from, python, err, lines[len(lines)-1])
	}
	return python
}
