// Package tools only pins the tool named by this module's go.mod `tool` directive (built by
// tests/e2e/build-tools.sh). The file exists so the module has a Go source to hash.
package tools
