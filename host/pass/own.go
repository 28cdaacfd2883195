package pass

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Own are meshd's own paths on the machine as this node's agent is configured: its data dir,
// seal key, operator socket's directory and config file. No module may declare a file at or
// under one, nor mount one into a container. The catalogue refuses the default paths when a
// module is added; where an agent was configured elsewhere only the node itself knows, so the
// host refuses those as the resource's error.
type Own []string

// Refuse names why path p (a machine path) is meshd's own, or returns nil.
func (o Own) Refuse(what, p string) error {
	p = filepath.Clean(p)
	for _, mine := range o {
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
