package nn

import (
	"fmt"
	"math"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/internal/elem"
)

// AdamWConfig holds AdamW's hyperparameters.
type AdamWConfig struct {
	// LR is the learning rate η.
	LR float64
	// Beta1 and Beta2 are the decay rates of the first and second moments.
	Beta1, Beta2 float64
	// Eps is added to the root of the second moment.
	Eps float64
	// WeightDecay is the decoupled weight decay λ.
	WeightDecay float64
}

// DefaultAdamW returns PyTorch's AdamW defaults: LR 1e-3, Beta1 0.9,
// Beta2 0.999, Eps 1e-8, WeightDecay 0.01.
func DefaultAdamW() AdamWConfig {
	return AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
}

// AdamW is the Adam optimiser with decoupled weight decay (Loshchilov and
// Hutter, 2019). Step t (counting from 1) updates each element θ of a
// parameter with gradient g as
//
//	θ ← θ·(1 − η·λ)             (matrices only, see below)
//	m ← β1·m + (1 − β1)·g
//	v ← β2·v + (1 − β2)·g²
//	θ ← θ − η · (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + ε)
//
// in that order, as PyTorch's AdamW does. The arithmetic is float64; m and v
// are stored as float32. Weight decay applies to parameters with more than
// one row (weight matrices, embedding tables) and not to 1×n ones (norm
// gains and biases).
//
// The hyperparameters may be changed between steps (a learning-rate
// schedule); a Step allocates nothing.
type AdamW struct {
	AdamWConfig
	params []*autograd.Tensor
	m, v   [][]float32
	t      int
}

// NewAdamW returns an AdamW optimiser for params, or an error naming a field
// of cfg that is out of range or a parameter without a gradient.
func NewAdamW(params []*autograd.Tensor, cfg AdamWConfig) (*AdamW, error) {
	switch {
	case !(cfg.LR > 0) || math.IsInf(cfg.LR, 0):
		return nil, fmt.Errorf("nn: AdamWConfig.LR is %v, must be positive and finite", cfg.LR)
	case !(cfg.Beta1 >= 0 && cfg.Beta1 < 1):
		return nil, fmt.Errorf("nn: AdamWConfig.Beta1 is %v, must be in [0, 1)", cfg.Beta1)
	case !(cfg.Beta2 >= 0 && cfg.Beta2 < 1):
		return nil, fmt.Errorf("nn: AdamWConfig.Beta2 is %v, must be in [0, 1)", cfg.Beta2)
	case !(cfg.Eps > 0) || math.IsInf(cfg.Eps, 0):
		return nil, fmt.Errorf("nn: AdamWConfig.Eps is %v, must be positive and finite", cfg.Eps)
	case !(cfg.WeightDecay >= 0) || math.IsInf(cfg.WeightDecay, 0):
		return nil, fmt.Errorf("nn: AdamWConfig.WeightDecay is %v, must be non-negative and finite", cfg.WeightDecay)
	}
	o := &AdamW{AdamWConfig: cfg, params: params}
	for i, p := range params {
		if !p.RequiresGrad() {
			return nil, fmt.Errorf("nn: NewAdamW: parameter %d (%dx%d) has no gradient", i, p.Rows, p.Cols)
		}
		o.m = append(o.m, make([]float32, p.Len()))
		o.v = append(o.v, make([]float32, p.Len()))
	}
	return o, nil
}

// Step applies one update to every parameter from its current gradient.
func (o *AdamW) Step() {
	o.t++
	c1 := 1 - elem.Pow(o.Beta1, float64(o.t))
	c2 := 1 - elem.Pow(o.Beta2, float64(o.t))
	for k, p := range o.params {
		decay := 1.0
		if p.Rows > 1 {
			decay = 1 - float64(o.LR*o.WeightDecay)
		}
		m, v := o.m[k], o.v[k]
		for i, g32 := range p.Grad {
			g := float64(g32)
			mi := float64(o.Beta1*float64(m[i])) + float64((1-o.Beta1)*g)
			vi := float64(o.Beta2*float64(v[i])) + float64((1-o.Beta2)*g*g)
			m[i], v[i] = float32(mi), float32(vi)
			theta := float64(float64(p.Data[i]) * decay)
			p.Data[i] = float32(theta - o.LR*(mi/c1)/(math.Sqrt(vi/c2)+o.Eps))
		}
	}
}

// ZeroGrad clears the gradient of every parameter.
func (o *AdamW) ZeroGrad() {
	for _, p := range o.params {
		p.ZeroGrad()
	}
}

// AdamWState is an optimiser's state between steps: the number of steps
// taken and the moments of every parameter, in the order of the parameters
// given to NewAdamW. Saving it with the parameters and restoring both lets
// training continue exactly as if it had not stopped.
type AdamWState struct {
	// T is the number of steps taken.
	T int
	// M and V are the first and second moments, one slice per parameter.
	M, V [][]float32
}

// State returns a copy of the optimiser's state.
func (o *AdamW) State() AdamWState {
	s := AdamWState{T: o.t, M: make([][]float32, len(o.m)), V: make([][]float32, len(o.v))}
	for k := range o.m {
		s.M[k] = append([]float32(nil), o.m[k]...)
		s.V[k] = append([]float32(nil), o.v[k]...)
	}
	return s
}

// SetState restores a state returned by State, or returns an error naming
// the first parameter whose moments do not fit; the optimiser is then
// unchanged.
func (o *AdamW) SetState(s AdamWState) error {
	if s.T < 0 {
		return fmt.Errorf("nn: AdamWState.T is %d, must not be negative", s.T)
	}
	if len(s.M) != len(o.params) || len(s.V) != len(o.params) {
		return fmt.Errorf("nn: AdamWState has %d first and %d second moments for %d parameters", len(s.M), len(s.V), len(o.params))
	}
	for k, p := range o.params {
		if len(s.M[k]) != p.Len() || len(s.V[k]) != p.Len() {
			return fmt.Errorf("nn: AdamWState moments of parameter %d have %d and %d values, want %d (%dx%d)", k, len(s.M[k]), len(s.V[k]), p.Len(), p.Rows, p.Cols)
		}
	}
	o.t = s.T
	for k := range o.params {
		copy(o.m[k], s.M[k])
		copy(o.v[k], s.V[k])
	}
	return nil
}
