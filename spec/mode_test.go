package spec

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMoDEConfig checks the MoDE configuration's validation, naming the
// field at fault, and its flat JSON form's round trip.
func TestMoDEConfig(t *testing.T) {
	staged := MoDEConfig{Block: DefaultBlockConfig(8, 2, 16), Form: MoDEStaged, Experts: 2, Capacity: 0.5, ExpertCapacity: 0.5}
	integrated := MoDEConfig{Block: DefaultBlockConfig(8, 2, 16), Form: MoDEIntegrated, Experts: 2, NoOpExperts: 1, ExpertCapacity: 0.5}
	for _, c := range []MoDEConfig{staged, integrated} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", c.Form, err)
		}
	}
	if staged.GateWidth() != 2 || integrated.GateWidth() != 3 {
		t.Errorf("gate widths %d, %d, want 2 and 3", staged.GateWidth(), integrated.GateWidth())
	}
	for _, tc := range []struct {
		field string
		edit  func(*MoDEConfig)
		base  MoDEConfig
	}{
		{"Experts", func(c *MoDEConfig) { c.Experts = 0 }, staged},
		{"ExpertCapacity", func(c *MoDEConfig) { c.ExpertCapacity = 1.5 }, staged},
		{"ExpertCapacity", func(c *MoDEConfig) { c.ExpertCapacity = 0 }, integrated},
		{"NoOpExperts", func(c *MoDEConfig) { c.NoOpExperts = 1 }, staged},
		{"NoOpExperts", func(c *MoDEConfig) { c.NoOpExperts = 0 }, integrated},
		{"Capacity", func(c *MoDEConfig) { c.Capacity = 0 }, staged},
		{"Capacity", func(c *MoDEConfig) { c.Capacity = 0.5 }, integrated},
		{"Form", func(c *MoDEConfig) { c.Form = "mixed" }, staged},
		{"DFF", func(c *MoDEConfig) { c.Block.DFF = 0 }, integrated},
	} {
		c := tc.base
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v, want one naming %s", c, err, tc.field)
		}
	}
	raw, err := json.Marshal(integrated)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"d_model":8`, `"form":"integrated"`, `"experts":2`, `"noop_experts":1`, `"expert_capacity":0.5`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("JSON %s lacks %s", raw, key)
		}
	}
	var back MoDEConfig
	if err := json.Unmarshal(raw, &back); err != nil || back != integrated {
		t.Errorf("round trip: got %+v (error %v), want %+v", back, err, integrated)
	}
	if err := json.Unmarshal([]byte(strings.Replace(string(raw), `"experts"`, `"expert"`, 1)), &back); err == nil || !strings.Contains(err.Error(), `"expert"`) {
		t.Errorf("unknown key expert: error %v, want one naming it", err)
	}
}
