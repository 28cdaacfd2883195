package container

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	dcontainer "github.com/docker/docker/api/types/container"
)

// InspectAll observes every container on the engine, running or not, meshd's included, sorted
// by name: what `meshd module draft` drafts from. A container that goes away between the list
// and its inspect is left out.
func (e *Engine) InspectAll(ctx context.Context) ([]Observed, error) {
	cs, err := e.cli.ContainerList(ctx, dcontainer.ListOptions{All: true})
	if err != nil {
		return nil, e.wrap("list containers", err)
	}
	var out []Observed
	for _, c := range cs {
		o, found, err := e.Inspect(ctx, c.ID)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, o)
		}
	}
	sortObserved(out)
	return out, nil
}

func sortObserved(os []Observed) {
	sort.Slice(os, func(i, j int) bool { return os[i].Name < os[j].Name })
}

// FromInspect reads a container's inspect JSON (as `docker inspect` prints one, or as the host's
// record store keeps a found container's) with neither its image nor the engine's defaults
// known: what the image sets counts as the container's own, and nothing is judged unexpressed.
func FromInspect(raw []byte) (Observed, error) {
	var c dcontainer.InspectResponse
	if err := json.Unmarshal(raw, &c); err != nil {
		return Observed{}, fmt.Errorf("container inspect JSON: %w", err)
	}
	if c.ContainerJSONBase == nil || c.Config == nil {
		return Observed{}, fmt.Errorf("container inspect JSON: no Id or Config")
	}
	return observe(c, raw, nil, "", nil), nil
}
