package loadtest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Each skew draws products with the probabilities it documents: the
// hottest product's share and how many products take half the demand,
// against the exact distribution, over 200,000 draws from a fixed seed.
func TestSkewPickerFollowsItsDistribution(t *testing.T) {
	const n, draws = 2000, 200_000
	zipf := func(s float64) func(i int) float64 {
		var sum float64
		for i := range n {
			sum += math.Pow(float64(i+1), -s)
		}
		return func(i int) float64 { return math.Pow(float64(i+1), -s) / sum }
	}
	for _, tt := range []struct {
		skew string
		pmf  func(i int) float64
	}{
		{"uniform", func(int) float64 { return 1.0 / n }},
		{"zipf:1.1", zipf(1.1)},
		{"zipf:2", zipf(2)},
		// floor(n u^3) = i for u^3 in [i/n, (i+1)/n).
		{"pow:3", func(i int) float64 { return math.Cbrt(float64(i+1)/n) - math.Cbrt(float64(i)/n) }},
	} {
		t.Run(tt.skew, func(t *testing.T) {
			sk, err := ParseSkew(tt.skew)
			if err != nil {
				t.Fatal(err)
			}
			if sk.String() != tt.skew {
				t.Errorf("String: got %q, want %q", sk.String(), tt.skew)
			}
			pick := sk.Picker(n, rand.New(rand.NewPCG(1, 2)))
			got := make([]int, n)
			for range draws {
				i := pick()
				if i < 0 || i >= n {
					t.Fatalf("drew %d, want 0..%d", i, n-1)
				}
				got[i]++
			}
			// Half the demand: the products, from the hottest, that it takes.
			half := func(share func(i int) float64) int {
				var c float64
				for i := range n {
					if c += share(i); c >= 0.5 {
						return i + 1
					}
				}
				return n
			}
			wantTop, gotTop := tt.pmf(0), float64(got[0])/draws
			if math.Abs(gotTop-wantTop) > 0.1*wantTop+3/math.Sqrt(draws) {
				t.Errorf("hottest product's share: got %.4f, want %.4f", gotTop, wantTop)
			}
			wantHalf, gotHalf := half(tt.pmf), half(func(i int) float64 { return float64(got[i]) / draws })
			if math.Abs(float64(gotHalf-wantHalf)) > 0.1*float64(wantHalf)+1 {
				t.Errorf("products taking half the demand: got %d, want %d", gotHalf, wantHalf)
			}
		})
	}
}

func TestParseSkewRefusesWhatItCannotDraw(t *testing.T) {
	for _, s := range []string{"zipf", "zipf:1", "zipf:0.5", "zipf:x", "pow:0.9", "pow", "uniform:2", "normal:1", "zipf:+Inf"} {
		if sk, err := ParseSkew(s); err == nil {
			t.Errorf("ParseSkew(%q): got %+v, want an error", s, sk)
		}
	}
	if sk, err := ParseSkew(""); err != nil || sk != DefaultSkew {
		t.Errorf(`ParseSkew(""): got %+v, %v; want DefaultSkew`, sk, err)
	}
}
