// Package tools pins promtool through this module's go.mod `tool` directive (built by
// tests/e2e/build-tools.sh); cmd/promql-selectors is this repository's own small helper.
package tools
