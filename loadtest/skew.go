package loadtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Skew is how a sale's demand spreads over its products. A flash sale is
// a burst over a few hot products and a long tail: product 0 is the
// hottest, and the larger a product's index, the fewer buyers it gets.
// The zero value is DefaultSkew.
type Skew struct {
	// Kind is SkewUniform, SkewZipf or SkewPower.
	Kind string
	// Param is the Zipf exponent s (> 1), or the power k (>= 1).
	Param float64
}

// Kinds of skew.
const (
	// SkewUniform: every product is as likely.
	SkewUniform = "uniform"
	// SkewZipf: product i with probability proportional to 1/(i+1)^s, as
	// popularity often is (rand.Zipf with v = 1). With s = 1.1 and 2,000
	// products the hottest gets 17% of the demand and the first 15 half
	// of it.
	SkewZipf = "zipf"
	// SkewPower: product floor(n * u^k) for u uniform in [0, 1): with
	// k = 3 and 2,000 products the hottest gets 8% of the demand and the
	// first 250 half of it: a flatter head than zipf:1.1.
	SkewPower = "pow"
)

// DefaultSkew is a Zipf skew with exponent 1.1.
var DefaultSkew = Skew{Kind: SkewZipf, Param: 1.1}

// ParseSkew reads a skew: "uniform", "zipf:S" (S > 1) or "pow:K" (K >= 1).
// "" is DefaultSkew.
func ParseSkew(s string) (Skew, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultSkew, nil
	}
	kind, param, hasParam := strings.Cut(s, ":")
	sk := Skew{Kind: kind}
	if kind == SkewUniform {
		if hasParam {
			return Skew{}, fmt.Errorf("skew %q: uniform takes no parameter", s)
		}
		return sk, nil
	}
	if !hasParam {
		return Skew{}, fmt.Errorf("skew %q: want uniform, zipf:S (S > 1, such as zipf:1.1) or pow:K (K >= 1, such as pow:3)", s)
	}
	f, err := strconv.ParseFloat(param, 64)
	if err != nil {
		return Skew{}, fmt.Errorf("skew %q: %q is not a number", s, param)
	}
	sk.Param = f
	return sk, sk.validate()
}

func (sk Skew) validate() error {
	switch {
	case sk == Skew{}, sk.Kind == SkewUniform:
		return nil
	case sk.Kind == SkewZipf && sk.Param > 1 && !math.IsInf(sk.Param, 0):
		return nil
	case sk.Kind == SkewPower && sk.Param >= 1 && !math.IsInf(sk.Param, 0):
		return nil
	case sk.Kind == SkewZipf:
		return fmt.Errorf("skew zipf:%v: want an exponent above 1", sk.Param)
	case sk.Kind == SkewPower:
		return fmt.Errorf("skew pow:%v: want a power of 1 or more", sk.Param)
	}
	return fmt.Errorf("skew %q unknown: want uniform, zipf:S or pow:K", sk.Kind)
}

// orDefault is sk, or DefaultSkew for the zero value.
func (sk Skew) orDefault() Skew {
	if sk == (Skew{}) {
		return DefaultSkew
	}
	return sk
}

// String is the skew as ParseSkew reads it.
func (sk Skew) String() string {
	sk = sk.orDefault()
	if sk.Kind == SkewUniform {
		return SkewUniform
	}
	return sk.Kind + ":" + strconv.FormatFloat(sk.Param, 'g', -1, 64)
}

// Picker returns a function that draws product indices in [0, n) with
// this skew from rng. It is not safe for concurrent use (nor is rng).
func (sk Skew) Picker(n int, rng *rand.Rand) func() int {
	sk = sk.orDefault()
	if n <= 1 {
		return func() int { return 0 }
	}
	switch sk.Kind {
	case SkewZipf:
		z := rand.NewZipf(rng, sk.Param, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	case SkewPower:
		return func() int { return min(int(float64(n)*math.Pow(rng.Float64(), sk.Param)), n-1) }
	}
	return func() int { return rng.IntN(n) }
}
