package main

import (
	"fmt"
	"io"
	"meshd/api"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

// nodeSetCmd is `meshd node set NODE KEY=VALUE...`: settings outlive genesis (ADR 0100).
func nodeSetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "set NODE KEY=VALUE...",
		Short: "Change a node's settings (store.port=6380, mesh.gossip=7947); an empty VALUE returns one to its default",
		Long: `Change a node's settings in the record. KEY is "module.setting" (or a setting name the catalogue
knows by itself); an empty VALUE returns the setting to the catalogue's default.

Before anything is committed, every port the change moves is checked on the node itself by the
checks genesis runs: a port a container publishes, a process listens on, or that cannot be bound
there is refused, naming the node, the setting, the port and its holder, and the record is left as
it was. A port the node already binds for the same setting is not held, so a setting can be moved
back. Once committed, the node follows: containers are re-published, openings and the guard move,
the bus and gossip rebind at once; a server's Raft port moves at its agent's next start.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("%s takes NODE and at least one KEY=VALUE (got %d argument(s)); see `%s --help`", cmd.CommandPath(), len(args), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			values, err := parseSettings(args[1:])
			if err != nil {
				return err
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.SettingsView
			if err := g.client().Post(ctx, "/v1/nodes/"+url.PathEscape(args[0])+"/settings", api.SettingsRequest{Values: values}, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "node %s: settings changed\n", v.Node.Name)
				for _, k := range sortedKeys(values) {
					if values[k] == "" {
						fmt.Fprintf(w, "  %s\tback to its default\n", k)
					} else {
						fmt.Fprintf(w, "  %s\t= %s\n", k, values[k])
					}
				}
				for _, c := range v.Checked {
					fmt.Fprintf(w, "checked on the node\tport %d/%s on %s (%s, for %s): free\n", c.Port, c.Proto, c.Address, c.Setting, c.By)
				}
			})
		},
	}
}

// parseSettings reads KEY=VALUE arguments; a key given twice is a mistake, not a choice.
func parseSettings(args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE (such as store.port=6380; an empty VALUE returns the setting to its default)", a)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("setting %s is given twice", k)
		}
		out[k] = v
	}
	return out, nil
}
