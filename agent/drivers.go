package agent

import (
	"log/slog"

	"meshd/host"
)

// drivers builds the host reconciler's drivers for the resource kinds other than files, from the
// agent's configuration. Each kind's driver lives with the package that speaks its engine; this is
// only where the agent hands them their configuration.
func drivers(cfg Config, log *slog.Logger) ([]host.Driver, error) {
	var out []host.Driver
	return out, nil
}
