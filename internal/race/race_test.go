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

// TestSkipShort: SkipShort skips exactly under -race -short.
func TestSkipShort(t *testing.T) {
	ran := false
	t.Run("sub", func(t *testing.T) {
		SkipShort(t, "a test of SkipShort")
		ran = true
	})
	if want := !(Enabled && testing.Short()); ran != want {
		t.Errorf("the test ran: %v, want %v (race %v, -short %v)", ran, want, Enabled, testing.Short())
	}
}
