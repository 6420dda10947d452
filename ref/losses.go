package ref

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/internal/elem"
	"github.com/modref/modref/ref/internal/prod"
)

// BCEWithLogits is the binary cross-entropy of logit z against target t in
// the stable form of docs/spec.md §8: max(z,0) - z*t + log(1 + exp(-|z|)).
func BCEWithLogits(z, t float64) float64 {
	return math.Max(z, 0) - float64(z*t) + elem.Log1p(elem.Exp(-math.Abs(z)))
}

// Targets is docs/spec.md §8: t[b][i] = 1 if token i of row b was selected
// at this layer, else 0. The targets are constants.
func Targets(sel Selection) [][]float64 {
	return sel.Mask()
}

// MeanBCE is the mean of BCEWithLogits(z[b][i], t[b][i]) over the valid
// tokens (padded positions contribute nothing); 0 if no token is valid.
func MeanBCE(z, t [][]float64, valid []int) float64 {
	sum, n := 0.0, 0
	for b := range z {
		for i := 0; i < validLen(valid, b, len(z[b])); i++ {
			sum += BCEWithLogits(z[b][i], t[b][i])
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// RouterBCELoss is docs/spec.md §8, `router_bce` (paper Sec. 3.5):
// L = mean over valid tokens of BCEWithLogits(r_i, t_i).
func RouterBCELoss(r, t [][]float64, valid []int) float64 {
	return MeanBCE(r, t, valid)
}

// SiLU is v * sigma(v).
func SiLU(v float64) float64 {
	return v * Sigmoid(v)
}

// PredictorLogit is the auxiliary MLP predictor of docs/spec.md §8 (paper
// Sec. 3.5) for one token: q = SiLU(x·PredW1 + PredB1)·PredW2 + PredB2. The
// caller passes sg(x): the predictor's input is a constant.
func PredictorLogit(p *LayerParams, x []float64) float64 {
	h := len(p.PredB1)
	q := p.PredB2[0]
	for u := 0; u < h; u++ {
		a := p.PredB1[u]
		for j := range x {
			a += float64(x[j] * p.PredW1.At(j, u))
		}
		q += float64(SiLU(a) * p.PredW2.At(u, 0))
	}
	return q
}

// PredictorLogits applies PredictorLogit to every position of every row of
// the stop-gradient input xsg (B matrices S×d), with PredictorLogit's bits:
// the hidden layer x·PredW1 is one product whose chains start from PredB1.
func PredictorLogits(p *LayerParams, xsg []*mat.Dense) [][]float64 {
	d, h := p.PredW1.Dims()
	q := make([][]float64, len(xsg))
	for b, xb := range xsg {
		s, _ := xb.Dims()
		pre := make([]float64, s*h)
		for i := 0; i < s; i++ {
			copy(pre[i*h:(i+1)*h], p.PredB1)
		}
		prod.Mul(s, h, d, rowsOf(rawRows(xb), d), denseOf(p.PredW1), pre, h, true)
		q[b] = make([]float64, s)
		for i := 0; i < s; i++ {
			qi := p.PredB2[0]
			for u, a := range pre[i*h : (i+1)*h] {
				qi += float64(SiLU(a) * p.PredW2.At(u, 0))
			}
			q[b][i] = qi
		}
	}
	return q
}

// PredictorLoss is docs/spec.md §8, `predictor`: L = mean over valid tokens
// of BCEWithLogits(q_i, t_i).
func PredictorLoss(q, t [][]float64, valid []int) float64 {
	return MeanBCE(q, t, valid)
}

// PredictorAccuracy is docs/spec.md §8: the fraction of valid tokens with
// 1[q_i > 0] == t_i; 0 if no token is valid.
func PredictorAccuracy(q, t [][]float64, valid []int) float64 {
	hit, n := 0, 0
	for b := range q {
		for i := 0; i < validLen(valid, b, len(q[b])); i++ {
			pred := 0.0
			if q[b][i] > 0 {
				pred = 1
			}
			if pred == t[b][i] {
				hit++
			}
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(hit) / float64(n)
}

// LoadBalanceLoss is docs/spec.md §8, load balancing: p = sigma(r),
// F_s = mean_b m_{b,s}, P_s = mean_b p_{b,s}, L = S * sum_s F_s P_s. Padded
// entries contribute 0 to both sums; the means still divide by B.
func LoadBalanceLoss(r, m [][]float64, valid []int) float64 {
	rows := len(r)
	s := len(r[0])
	l := 0.0
	for i := 0; i < s; i++ {
		f, p := 0.0, 0.0
		for b := 0; b < rows; b++ {
			if i < validLen(valid, b, s) {
				f += m[b][i]
				p += Sigmoid(r[b][i])
			}
		}
		l += float64((f / float64(rows)) * (p / float64(rows)))
	}
	return float64(s) * l
}

// CrossEntropy is -log softmax(logits)[target], computed as
// logsumexp(logits) - logits[target].
func CrossEntropy(logits []float64, target int) float64 {
	m := logits[0]
	for _, v := range logits[1:] {
		m = math.Max(m, v)
	}
	sum := 0.0
	for _, v := range logits {
		sum += elem.Exp(v - m)
	}
	return m + elem.Log(sum) - logits[target]
}

// checkTokens checks a B×S token array against the vocabulary size; positions
// at or after V_b are not read.
func checkTokens(name string, tok [][]int, rows, s, vocab int, valid []int) error {
	if len(tok) != rows {
		return fmt.Errorf("%s: %d rows, want B = %d", name, len(tok), rows)
	}
	for b, row := range tok {
		if len(row) != s {
			return fmt.Errorf("%s: row %d has length %d, want S = %d", name, b, len(row), s)
		}
		for i := 0; i < validLen(valid, b, s); i++ {
			if row[i] < 0 || row[i] >= vocab {
				return fmt.Errorf("%s: row %d position %d is %d, want 0 <= id < vocab = %d", name, b, i, row[i], vocab)
			}
		}
	}
	return nil
}
