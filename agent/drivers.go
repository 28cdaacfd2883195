package agent

import (
	"log/slog"
	"os"
	"path/filepath"

	"meshd/container"
	"meshd/host"
	"meshd/host/containers"
	"meshd/host/openings"
	"meshd/host/tunnel"
	"meshd/netfilter"
	"meshd/pki"
	"meshd/wg"
)

// drivers builds the host reconciler's drivers for the resource kinds other than files, from the
// agent's configuration. The drivers live in host/containers, host/openings and host/tunnel, each
// over the package that speaks its engine (container/, netfilter/, wg/); this is only where the
// agent hands them their configuration.
func drivers(cfg Config, log *slog.Logger) ([]host.Driver, error) {
	var out []host.Driver
	// Openings first, then containers: a pass runs its drivers in this order, and the guard (an
	// opening's refusal) must be loaded before a foundation container publishes a guarded port,
	// or the store and the broker are open to anyone for the seconds in between (issue 11: seen
	// on the measured machine, whose found firewall lets forwarded traffic to 5672 through).
	// Openings, through the firewall found on this machine (the zero netfilter.Env) on an adopted
	// node, meshd's derived filter on a converged one; what a retire keeps lives in the data dir.
	nlog := log.With("part", "netfilter")
	out = append(out, openings.New(openings.Config{
		Env:    netfilter.Env{StateDir: filepath.Join(cfg.DataDir, "netfilter"), Log: nlog},
		Logger: nlog,
	}))
	// The private network's interface: raised from the declaration, or the found tunnel taken
	// over in place. Its key is sealed under the node's seal key; a userspace device runs in a
	// process of its own (`meshd tunnel-device`), so restarting the agent does not interrupt it.
	seal, err := pki.ReadSealKey(pki.SealKeyPath(cfg.SealKey))
	if err != nil {
		return nil, err
	}
	tcfg := tunnel.Config{Keys: tunnel.SealedKey{Path: tunnel.KeyPath(cfg.DataDir), Seal: seal},
		Logger: log.With("part", "tunnel"), DockerHost: cfg.DockerHost}
	if exe, err := os.Executable(); err == nil {
		tcfg.Device = wg.DeviceCommand{Path: exe, Args: []string{"tunnel-device"},
			LogFile: filepath.Join(cfg.DataDir, "tunnel-device.log")}.Spawn
		tcfg.DeviceProgram = exe
	}
	out = append(out, tunnel.New(tcfg))
	// Containers, through the Docker engine at cfg.DockerHost. Nothing is dialled here: an engine
	// that is down is reported on every pass and used again once it answers.
	eng, err := container.New(cfg.DockerHost, container.WithLogger(log.With("part", "container")))
	if err != nil {
		return nil, err
	}
	out = append(out, containers.New(eng, log.With("part", "container")))
	return out, nil
}
