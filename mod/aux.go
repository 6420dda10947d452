package mod

import (
	"github.com/modref/modref/autograd"
	"github.com/modref/modref/spec"
)

// losses computes the auxiliary objectives of docs/spec.md §8 from the
// router weights r and the predictor logits q (nil without a predictor),
// against the targets in res, over the valid tokens:
//
//   - router_bce:     mean BCEWithLogits(r_i, t_i);
//   - predictor:      mean BCEWithLogits(q_i, t_i), q computed on sg(x);
//   - load balancing: S·Σ_s F_s·P_s with F_s = mean_b m_{b,s} over the
//     routing mask m (res.Selected, which differs from the targets under
//     causal routing) and P_s = mean_b σ(r_{b,s}), padded entries counting 0;
//
// and sets res.AuxLoss to their weighted sum.
func (l *Layer) losses(tp *autograd.Tape, res *LayerResult, bt batch, padded bool, r, q *autograd.Tensor) {
	cfg := l.cfg
	var valid []bool
	if padded {
		valid = autograd.Make[bool](tp, len(res.Targets))
		for k := range valid {
			valid[k] = bt.isValid(k)
		}
	}
	bce := tp.BCEWithLogits(r, res.Targets, valid)
	res.RouterBCE = float64(bce.Data[0])

	// L = Σ_{b,s} σ(r_{b,s}) · S·F_s/B: the load-balancing loss as one
	// weighted sum, the weights constant.
	f := autograd.Make[float64](tp, bt.s)
	for _, row := range res.Selected {
		for _, i := range row {
			f[i]++
		}
	}
	coef := tp.Zeros(len(res.Targets), 1)
	for k := range coef.Data {
		if bt.isValid(k) {
			coef.Data[k] = float32(float64(bt.s) * f[k%bt.s] / float64(bt.rows*bt.rows))
		}
	}
	lb := tp.SumAll(tp.Mul(tp.Sigmoid(r), coef))
	res.LoadBalance = float64(lb.Data[0])

	var aux *autograd.Tensor
	if cfg.Aux == spec.AuxRouterBCE && cfg.AuxWeight > 0 {
		aux = tp.Scale(bce, float32(cfg.AuxWeight))
	}
	if q != nil {
		pl := tp.BCEWithLogits(q, res.Targets, valid)
		res.PredictorBCE = float64(pl.Data[0])
		if cfg.Aux == spec.AuxPredictor && cfg.AuxWeight > 0 {
			aux = tp.Scale(pl, float32(cfg.AuxWeight))
		}
		hit, n := 0, 0
		for k, t := range res.Targets {
			if bt.isValid(k) {
				if (q.Data[k] > 0) == (t == 1) {
					hit++
				}
				n++
			}
		}
		if n > 0 {
			res.PredictorAccuracy = float64(hit) / float64(n)
		}
	}
	if cfg.LoadBalanceWeight > 0 {
		term := tp.Scale(lb, float32(cfg.LoadBalanceWeight))
		if aux == nil {
			aux = term
		} else {
			aux = tp.Add(aux, term)
		}
	}
	if aux != nil {
		res.AuxLoss = aux
		res.Aux = float64(aux.Data[0])
	}
}
