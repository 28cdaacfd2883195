package container

import (
	"context"
	"strings"

	dcontainer "github.com/docker/docker/api/types/container"

	"meshd/ctrspec"
)

// Running is one running container as a reader of the machine sees it: what it runs, the ports it
// publishes, and the powers it holds over the machine's network.
type Running struct {
	Name  string
	ID    string
	Image string // the reference it was created with (ghcr.io/wg-easy/wg-easy:14)
	// NetworkMode is the engine's: "host" shares the machine's network namespace (its links are
	// the machine's), anything else is a namespace of the container's own.
	NetworkMode string
	// NetAdmin says it may configure network links: CAP_NET_ADMIN added, or privileged.
	NetAdmin  bool
	Published []Published
}

// HostNetwork says the container shares the machine's network namespace.
func (r Running) HostNetwork() bool { return r.NetworkMode == "host" }

// RunningContainers lists every running container on the machine, meshd's or not, with its
// image, network mode, published ports and whether it holds CAP_NET_ADMIN (read by inspecting
// each: the list the engine gives does not carry capabilities). A container that goes away
// between the list and its inspect is left out.
func (e *Engine) RunningContainers(ctx context.Context) ([]Running, error) {
	cs, err := e.cli.ContainerList(ctx, dcontainer.ListOptions{})
	if err != nil {
		return nil, e.wrap("list containers", err)
	}
	var out []Running
	for _, c := range cs {
		r := Running{Name: containerName(c.Names, c.ID), ID: c.ID, Image: c.Image, NetworkMode: c.HostConfig.NetworkMode}
		for _, p := range c.Ports {
			if p.PublicPort == 0 {
				continue // exposed, not published
			}
			r.Published = append(r.Published, Published{Container: r.Name, ContainerID: c.ID, Module: c.Labels[ctrspec.LabelModule],
				HostIP: p.IP, HostPort: p.PublicPort, ContainerPort: p.PrivatePort, Proto: p.Type})
		}
		sortPublished(r.Published)
		in, err := e.cli.ContainerInspect(ctx, c.ID)
		if err != nil {
			continue
		}
		if in.HostConfig != nil {
			r.NetAdmin = in.HostConfig.Privileged
			for _, cp := range in.HostConfig.CapAdd {
				cp = strings.ToUpper(strings.TrimPrefix(strings.ToUpper(cp), "CAP_"))
				if cp == "NET_ADMIN" || cp == "ALL" {
					r.NetAdmin = true
				}
			}
		}
		out = append(out, r)
	}
	return out, nil
}
