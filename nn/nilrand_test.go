package nn

import "testing"

// TestNilRandDrawsNothing builds a block with a nil rng (the shapes to load
// values into, as mod/modcase builds a case's layer): it draws nothing,
// and every weight matrix is 0.
func TestNilRandDrawsNothing(t *testing.T) {
	b, err := NewBlock(BlockConfig{D: 8, Heads: 2, DFF: 16, Norm: NormRMS, Act: ActSwiGLU}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Linear{b.Attn.Wq, b.Attn.Wk, b.Attn.Wv, b.Attn.Wo, b.MLP.W1, b.MLP.W2, b.MLP.W3} {
		for i, v := range p.W.Data {
			if v != 0 {
				t.Fatalf("a %dx%d weight is %v at %d, not 0", p.W.Rows, p.W.Cols, v, i)
			}
		}
	}
}
