package pass

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Own are meshd's own paths on the machine as this node's agent is configured: its data dir and
// the rest (the seal key, the operator socket's directory). No module may declare a file at or
// under one, nor mount one into a container, but for a module's own data directory DATA/MODULE
// (the shipped store and registry keep their data there), never under a name meshd uses itself.
// The catalogue refuses the default paths when a module is added; where an agent was configured
// elsewhere only the node itself knows, so the host refuses those as the resource's error.
type Own struct {
	Data   string
	Others []string
}

// dataNames are the data dir's entries of meshd's own, which no module may have for its data.
var dataNames = []string{"raft", "pki", "netfilter", "mesh"}

// Refuse names why module's path p (a machine path) is meshd's own, or returns nil. what says
// what p is to the module ("a file at", "a mount of"); a mount of a directory above one of
// meshd's paths is refused too.
func (o Own) Refuse(what, module, p string) error {
	p = filepath.Clean(p)
	if o.Data != "" && module != "" && !slices.Contains(dataNames, module) {
		mine := filepath.Join(filepath.Clean(o.Data), module)
		if p == mine || strings.HasPrefix(p, mine+"/") {
			return nil
		}
	}
	for _, mine := range append([]string{o.Data}, o.Others...) {
		if mine == "" {
			continue
		}
		mine = filepath.Clean(mine)
		if p == mine || strings.HasPrefix(p, mine+"/") || (what == "a mount of" && strings.HasPrefix(mine, p+"/")) {
			return fmt.Errorf("%s %s is meshd's own on this node (%s, as its agent is configured): no module may declare it", what, p, mine)
		}
	}
	return nil
}
