package format

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/modref/modref/internal/readfile"
)

// Format and Version identify the corpus format (docs/golden-format.md).
const (
	Format  = "modref-golden"
	Version = 1
)

// Case kinds.
const (
	KindLayer  = "layer"
	KindModel  = "model"
	KindDecode = "decode"
	// KindMoDE is a Mixture-of-Depths-and-Experts layer (docs/spec.md §14).
	KindMoDE = "mode"
)

// Array roles.
const (
	RoleInput    = "input"
	RoleParam    = "param"
	RoleUpstream = "upstream"
	RoleExpected = "expected"
)

// Manifest is a case's JSON description (docs/golden-format.md).
type Manifest struct {
	Format      string      `json:"format"`
	Version     int         `json:"version"`
	Name        string      `json:"name"`
	Kind        string      `json:"kind"`
	Description string      `json:"description"`
	Catches     []string    `json:"catches"`
	Config      CaseConfig  `json:"config"`
	Loss        string      `json:"loss"`
	Arrays      []ArrayInfo `json:"arrays"`
	Routing     Routing     `json:"routing"`
	// Precision names the profile (Profile) a candidate of this case is
	// judged under unless the checker is given another; empty, the
	// arrays' own tolerances (every case of the corpus).
	Precision  string     `json:"precision,omitempty"`
	Provenance Provenance `json:"provenance"`
}

// ArrayInfo describes one array of a case.
type ArrayInfo struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	// Tolerance is set for the arrays a candidate is judged on.
	Tolerance *Tolerance `json:"tolerance,omitempty"`
}

// Tolerance is an allclose-style bound: an element passes when
// |candidate − expected| ≤ ATol + RTol·|expected|. Integer arrays are
// compared exactly and carry a zero tolerance.
type Tolerance struct {
	RTol   float64 `json:"rtol"`
	ATol   float64 `json:"atol"`
	Reason string  `json:"reason"`
}

// Routing records how far a case's routing decisions are from a tie.
type Routing struct {
	// Margin is the near-tie margin of docs/spec.md §4: a flip between two
	// tokens whose router weights differ by less is not a decisive error.
	Margin float64 `json:"margin"`
	// Gaps holds, per routed layer (in layer order) and batch row, the gap
	// r_(k) − r_(k+1) between the last selected and the first unselected
	// router weight; absent for causal routing.
	Gaps [][]float64 `json:"gaps,omitempty"`
	// Ties is set on cases that exist to test the tie rule, or causal
	// routing exactly at its threshold (a router weight of 0).
	Ties bool `json:"ties,omitempty"`
}

// Provenance says how a case was made.
type Provenance struct {
	Generator        string `json:"generator"`
	GeneratorVersion int    `json:"generator_version"`
	Seed             uint64 `json:"seed"`
	Reference        string `json:"reference"`
}

var caseName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// ValidCaseName reports whether name may name a case: lower-case letters and
// digits in words joined by single hyphens.
func ValidCaseName(name string) bool { return caseName.MatchString(name) }

// ReadManifest reads and validates a manifest. Errors name the file and the
// field.
func ReadManifest(path string) (*Manifest, error) {
	raw, err := readfile.Read(path, MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// decodeManifest parses and validates manifest JSON.
func decodeManifest(raw []byte) (*Manifest, error) {
	// The version is read first so that a newer format gets a clear message
	// rather than complaints about its fields.
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("not a valid manifest: %w", err)
	}
	if head.Format != Format {
		return nil, fmt.Errorf("format is %q, want %q", head.Format, Format)
	}
	if head.Version != Version {
		return nil, fmt.Errorf("format version %d is not supported by this modref (it reads version %d)", head.Version, Version)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a valid manifest: %w", err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if !caseName.MatchString(m.Name) {
		return fmt.Errorf("name %q: want lower-case letters, digits and hyphens", m.Name)
	}
	switch m.Kind {
	case KindLayer, KindModel, KindDecode, KindMoDE:
	default:
		return fmt.Errorf("kind %q: want layer, model, decode or mode", m.Kind)
	}
	if err := m.Config.Validate(m.Kind); err != nil {
		return err
	}
	if err := m.Config.FitsSeqLen(m.Kind); err != nil {
		return err
	}
	if err := m.checkCatches(); err != nil {
		return err
	}
	if _, err := ParseProfile(m.Precision); err != nil {
		return err
	}
	seen := make(map[string]bool)
	for i, a := range m.Arrays {
		if a.Name == "" {
			return fmt.Errorf("arrays[%d] has no name", i)
		}
		if seen[a.Name] {
			return fmt.Errorf("array %q is listed twice", a.Name)
		}
		seen[a.Name] = true
		switch a.Role {
		case RoleInput, RoleParam, RoleUpstream, RoleExpected:
		default:
			return fmt.Errorf("array %q: role %q: want input, param, upstream or expected", a.Name, a.Role)
		}
		if a.DType != "<f8" && a.DType != "<i8" {
			return fmt.Errorf("array %q: dtype %q: the corpus stores <f8 and <i8", a.Name, a.DType)
		}
		for _, d := range a.Shape {
			if d < 1 {
				return fmt.Errorf("array %q: shape %v has a dimension below 1", a.Name, a.Shape)
			}
		}
		if a.Role == RoleExpected {
			if a.Tolerance == nil {
				return fmt.Errorf("array %q: an expected array needs a tolerance", a.Name)
			}
			if t := a.Tolerance; !(t.RTol >= 0) || !(t.ATol >= 0) {
				return fmt.Errorf("array %q: tolerance rtol=%v atol=%v: want values >= 0", a.Name, t.RTol, t.ATol)
			}
		}
	}
	return nil
}

// Encode returns the manifest as indented JSON with a final newline, with
// '<' and '>' left as they are (dtypes are "<f8").
func (m *Manifest) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkCatches reports a name in catches that is not a known deviation.
func (m *Manifest) checkCatches() error {
	for _, c := range m.Catches {
		if DeviationDescription(c) == "" {
			return fmt.Errorf("catches: %q is not a deviation of docs/spec.md §11", c)
		}
	}
	return nil
}

// CandidateName returns the name a candidate uses for an expected array.
func CandidateName(expected string) string { return strings.TrimPrefix(expected, "expected.") }
