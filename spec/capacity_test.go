package spec

import (
	"strings"
	"testing"
)

// TestCapacityValidate checks that each invalid capacity is refused with
// an error naming the offending field.
func TestCapacityValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Capacity
		want string
	}{
		{Capacity{Kind: "percent"}, `Kind = "percent"`},
		{Capacity{Kind: CapacityRatio, Ratio: 1.2}, "Ratio = 1.2"},
		{Capacity{Kind: CapacityLog, Ratio: 0.5, MaxLen: 1}, "MaxLen = 1"},
		{Capacity{Kind: CapacityInteger}, "Tokens = 0"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v.Validate() = %v, want an error mentioning %q", tc.c, err, tc.want)
		}
	}
}
