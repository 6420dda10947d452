package ref

import (
	"os/exec"
	"strings"
	"testing"
)

// ref/ is the truth the fast path is checked against, so it must not depend
// on the fast path: no package under autograd/, nn/ or mod/ (issue 3).
func TestImportsNoImplementationUnderTest(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const module = "github.com/modref/modref/"
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"autograd", "nn", "mod"} {
			if pkg == module+banned || strings.HasPrefix(pkg, module+banned+"/") {
				t.Errorf("ref depends on %s; it must import neither autograd/, nn/ nor mod/", pkg)
			}
		}
	}
}
