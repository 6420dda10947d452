package spec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// blockJSON is the JSON form of a BlockConfig, under docs/spec.md's names
// (docs/golden-format.md, "config"). It is embedded first in the forms of
// Config and MoDEConfig, so the block's fields come first and flat.
type blockJSON struct {
	DModel    int          `json:"d_model"`
	Heads     int          `json:"heads"`
	KVHeads   int          `json:"kv_heads,omitempty"`
	DFF       int          `json:"d_ff"`
	Norm      NormKind     `json:"norm"`
	NormEps   float64      `json:"norm_eps"`
	MLP       Activation   `json:"mlp"`
	Positions PositionKind `json:"positions"`
	RoPEBase  float64      `json:"rope_base"`
	Window    int          `json:"window,omitempty"`
	QKVBias   bool         `json:"qkv_bias,omitempty"`
}

func blockJSONOf(b BlockConfig) blockJSON {
	return blockJSON{
		DModel: b.D, Heads: b.Heads, KVHeads: b.KVHeads, DFF: b.DFF,
		Norm: b.Norm, NormEps: b.NormEps, MLP: b.MLP,
		Positions: b.Positions, RoPEBase: b.RoPEBase, Window: b.Window, QKVBias: b.QKVBias,
	}
}

func (j blockJSON) config() BlockConfig {
	return BlockConfig{
		D: j.DModel, Heads: j.Heads, KVHeads: j.KVHeads, DFF: j.DFF,
		Norm: j.Norm, NormEps: j.NormEps, MLP: j.MLP,
		Positions: j.Positions, RoPEBase: j.RoPEBase, Window: j.Window, QKVBias: j.QKVBias,
	}
}

// configJSON is the JSON form of a Config: the block's fields and the routing
// fields side by side.
type configJSON struct {
	blockJSON
	Router            RouterKind    `json:"router"`
	Jitter            float64       `json:"jitter"`
	Capacity          Capacity      `json:"capacity"`
	Weighting         Weighting     `json:"weighting"`
	Compute           Compute       `json:"compute"`
	MLPOnly           bool          `json:"mlp_only"`
	Aux               AuxObjective  `json:"aux"`
	AuxWeight         float64       `json:"aux_weight"`
	LoadBalanceWeight float64       `json:"load_balance_weight"`
	PredictorHidden   int           `json:"predictor_hidden"`
	Causal            CausalRouting `json:"causal"`
}

// MarshalJSON writes c flat, block and routing fields together.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{
		blockJSON: blockJSONOf(c.Block),
		Router:    c.Router, Jitter: c.Jitter, Capacity: c.Capacity,
		Weighting: c.Weighting, Compute: c.Compute, MLPOnly: c.MLPOnly,
		Aux: c.Aux, AuxWeight: c.AuxWeight, LoadBalanceWeight: c.LoadBalanceWeight,
		PredictorHidden: c.PredictorHidden, Causal: c.Causal,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes; a key it does not know is
// an error. It does not validate: that is Validate's job.
func (c *Config) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j configJSON
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*c = Config{
		Block:  j.config(),
		Router: j.Router, Jitter: j.Jitter, Capacity: j.Capacity,
		Weighting: j.Weighting, Compute: j.Compute, MLPOnly: j.MLPOnly,
		Aux: j.Aux, AuxWeight: j.AuxWeight, LoadBalanceWeight: j.LoadBalanceWeight,
		PredictorHidden: j.PredictorHidden, Causal: j.Causal,
	}
	return nil
}

// blockDiff is the JSON key of the first field in which blocks a and b
// differ ("" when they do not).
func blockDiff(a, b BlockConfig) string {
	ja, jb := reflect.ValueOf(blockJSONOf(a)), reflect.ValueOf(blockJSONOf(b))
	for i := range ja.NumField() {
		if ja.Field(i).Interface() != jb.Field(i).Interface() {
			key, _, _ := strings.Cut(ja.Type().Field(i).Tag.Get("json"), ",")
			return key
		}
	}
	return ""
}
