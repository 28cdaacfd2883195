package tunnel

import (
	"context"
	"log/slog"

	"meshd/wg"
)

// handOver replaces the device processes of another program than m.program (an upgrade's old
// binary: the unit's restart stops only the agent) by one of this program's serving cfg
// (wg.Supersede, the takeover's own short gap), so no process of the old binary is left and the
// port it holds is free for the mesh's interface. It returns nil and no error when there is
// none to replace.
func (m wgMachine) handOver(ctx context.Context, cfg wg.Config) (meshLink, error) {
	if m.spawn == nil || m.program == "" {
		return nil, nil
	}
	stale, err := wg.StaleDevices(m.program)
	if err != nil || len(stale) == 0 {
		return nil, err
	}
	log := m.log
	if log == nil {
		log = slog.Default()
	}
	for _, p := range stale {
		log.Info("replacing a device process of another program (an upgrade left it)",
			"pid", p.PID, "iface", p.Iface, "exe", p.Exe, "by", cfg.Name)
	}
	i, err := wg.Supersede(ctx, stale, cfg)
	if i == nil {
		return nil, err
	}
	if err != nil { // the new device serves; an old process is slow to go
		log.Warn("the mesh's interface was handed over", "iface", cfg.Name, "err", err)
	}
	return i, nil
}
