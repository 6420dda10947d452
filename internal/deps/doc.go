// Package deps holds the test of the module's import rule, written down in
// docs/design.md ("Dependencies"): which of the module's packages each
// package may import. It has no code of its own.
package deps
