package setup

// What else manages the found tunnel a genesis takes over (--take-tunnel), a join presents
// (--tunnel) or `meshd tunnel take` takes on the hub: refused before anything changes, as a
// firewall meshd does not speak is (tunnel.Managers says what is looked at and why).

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/container"
	"meshd/host/tunnel"
	"meshd/wg"
)

// tunnelProbe is what tunnel.Managers looks at for the found interface iface on this machine:
// the tunnel's port is port when the operator gave one, else the one iface listens on; the
// Docker engine at dockerHost is asked for its containers (none when it does not answer: the
// preflight says so on its own).
func tunnelProbe(iface string, port int, dockerHost string) tunnel.Probe {
	p := tunnel.Probe{Root: "/", Interface: iface, Port: port}
	if _, err := net.InterfaceByName(iface); err == nil {
		p.InNamespace = true
	}
	if p.Port == 0 {
		if f, err := wg.Discover(iface, ""); err == nil {
			p.Port = f.ListenPort
		}
	}
	p.Containers = func(ctx context.Context) ([]container.Running, error) {
		eng, err := container.New(dockerHost)
		if err != nil {
			return nil, nil
		}
		defer eng.Close()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cs, err := eng.RunningContainers(ctx)
		if errors.Is(err, container.ErrEngineUnreachable) {
			return nil, nil
		}
		return cs, err
	}
	return p
}

// tunnelManagerFindings are the preflight's findings on what else manages the found tunnel iface:
// each manager an error naming it, its file or container, and what the operator does; what could
// not be read a warning. The port is the mesh.tunnel setting when it is set.
func tunnelManagerFindings(ctx context.Context, iface string, settings map[string]string, dockerHost string) []api.Finding {
	port := 0
	if v := settings[catalogue.MeshModule+".tunnel"]; v != "" {
		port, _ = strconv.Atoi(v)
	}
	ms, err := tunnel.Managers(ctx, tunnelProbe(iface, port, dockerHost))
	var out []api.Finding
	for _, m := range ms {
		out = append(out, api.Finding{Check: "tunnel.manager", Level: api.LevelError, Holder: m.Kind + " (" + m.Source() + ")", Message: m.Refusal()})
	}
	if err != nil {
		out = append(out, api.Finding{Check: "tunnel.manager", Level: api.LevelWarning, Message: "cannot read everything that could manage " + iface + ": " + err.Error()})
	}
	return out
}

// TunnelManaged refuses the takeover of the found interface iface on this machine when something
// else manages it (a *tunnel.ManagedError naming each), nil otherwise. port is the tunnel port the
// operator asked for (0: the one iface listens on). `meshd tunnel take` on the hub asks it before
// the take is recorded.
func TunnelManaged(ctx context.Context, iface string, port int, dockerHost string) error {
	ms, _ := tunnel.Managers(ctx, tunnelProbe(iface, port, dockerHost))
	if len(ms) > 0 {
		return &tunnel.ManagedError{Managers: ms}
	}
	return nil
}

// hasError says findings hold one at error level.
func hasError(findings []api.Finding) bool {
	for _, f := range findings {
		if f.Level == api.LevelError {
			return true
		}
	}
	return false
}
