// Package packaging holds what installs meshd on a machine: the systemd unit for `meshd agent`
// and the documented example of its config file. They are embedded so that `meshd install-unit`
// writes the same files the repository shows, and the Debian package (packaging/deb) ships them.
package packaging

import (
	_ "embed"
	"strings"
)

// Unit is meshd.service with @MESHD@ (the binary) and @CONFIG@ (the config file) to fill in.
//
//go:embed meshd.service
var Unit string

// Config is the example config file, every key documented.
//
//go:embed meshd.yaml
var Config string

// UnitFor is the unit that runs binary as `meshd agent --config config`: what `meshd install-unit`
// writes, and what the lab installs on its machines.
func UnitFor(binary, config string) string {
	return strings.NewReplacer("@MESHD@", binary, "@CONFIG@", config).Replace(Unit)
}
