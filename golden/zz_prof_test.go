package golden

import "testing"

func TestZZProf(t *testing.T) {
	c := loadCase(t, "layer-capacity-floor")
	if _, err := emulate(c, nil); err != nil {
		t.Fatal(err)
	}
}
