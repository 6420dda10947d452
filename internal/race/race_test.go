package race

import (
	"testing"
	"time"
)

// TestLimit: Limit scales by Factor exactly when the race detector is on.
func TestLimit(t *testing.T) {
	want := 5 * time.Second
	if Enabled {
		want *= Factor
	}
	if got := Limit(5 * time.Second); got != want {
		t.Errorf("Limit(5s) = %v with Enabled %v, want %v", got, Enabled, want)
	}
}
