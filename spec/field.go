package spec

import (
	"fmt"
	"regexp"
)

// FieldError is an invalid field of a configuration, as Validate reports
// it. Its message names every field it mentions twice over, by its Go name
// for a caller in code (Error: "block: D = -5, want >= 1") and by its key
// in the configuration's JSON form (docs/golden-format.md, "config") for a
// reader of a file (Keyed: "config.layer.d_model = -5, want >= 1").
type FieldError struct {
	// what is the Go message's prefix, the configuration and the part of
	// it that holds the field: "block", "config: capacity".
	what string
	// under is the JSON path of that part from the configuration
	// validated, ending in a dot: "capacity.", "layers[2].layer.".
	under string
	// format is the message with each field written {Go name|JSON key};
	// args fill its verbs.
	format string
	args   []any
}

// fieldRef matches a field written {Go name|JSON key} in a FieldError's
// format.
var fieldRef = regexp.MustCompile(`\{([^{}|]*)\|([^{}|]*)\}`)

// invalid returns the error of a field of part what (Go's name for it),
// format naming each field {Go name|JSON key}.
func invalid(what, format string, args ...any) *FieldError {
	return &FieldError{what: what, format: format, args: args}
}

// in returns e as an error of a part of an enclosing configuration: what
// before its Go message, under before its JSON keys.
func (e *FieldError) in(what, under string) *FieldError {
	out := *e
	out.what = what + ": " + e.what
	out.under = under + e.under
	return &out
}

// Error is the message in Go's names.
func (e *FieldError) Error() string {
	return e.what + ": " + fmt.Sprintf(fieldRef.ReplaceAllString(e.format, "$1"), e.args...)
}

// Keyed is the message naming each field by its JSON key, as a file writes
// it, each key after prefix, the path of the configuration validated in
// the file: Keyed("config.layer.") is "config.layer.d_model = -5, want >=
// 1" for a layer's d_model.
func (e *FieldError) Keyed(prefix string) string {
	return fmt.Sprintf(fieldRef.ReplaceAllStringFunc(e.format, func(ref string) string {
		return prefix + e.under + fieldRef.FindStringSubmatch(ref)[2]
	}), e.args...)
}
