package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/catalogue"
	"meshd/fsm"
)

func moduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "module",
		Short: "The catalogue, and modules on nodes: list, show, add, assign, unassign, take",
		Long: `Modules are the units of the catalogue: files, containers and openings, with settings.

On an adopted node, assigning a module only prepares it: what it declares that is not on the machine
is created; what is found there is held as it is. Taking the module is the cutover, done when its data
has moved: from then on its resources converge. On a converged node, assigning is taking.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the catalogue's modules and where they are assigned",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var mods []agent.ModuleView
			if err := g.client().Get(ctx, "/v1/modules", &mods); err != nil {
				return err
			}
			return g.emit(mods, func(w io.Writer) {
				fmt.Fprintln(w, "MODULE\tFOUNDATION\tASSIGNED TO\tTAKEN ON\tDESCRIPTION")
				for _, m := range mods {
					f := ""
					if m.Foundation {
						f = "yes"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Name, f, list(m.AssignedTo), list(m.TakenOn), m.Description)
				}
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show MODULE",
		Short: "Show a module's manifest as the record holds it",
		Args:  exactArgs("MODULE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var m agent.ModuleView
			if err := g.client().Get(ctx, "/v1/modules/"+url.PathEscape(args[0]), &m); err != nil {
				return err
			}
			return g.emit(m, func(w io.Writer) {
				fmt.Fprintf(w, "module\t%s\n", m.Name)
				if m.Description != "" {
					fmt.Fprintf(w, "description\t%s\n", m.Description)
				}
				fmt.Fprintf(w, "source\t%s\n", m.Source)
				fmt.Fprintf(w, "assigned to\t%s\n", list(m.AssignedTo))
				fmt.Fprintf(w, "taken on\t%s\n", list(m.TakenOn))
				for _, k := range sortedKeys(m.Settings) {
					fmt.Fprintf(w, "setting\t%s = %s (default)\n", k, m.Settings[k])
				}
				for _, f := range m.Files {
					fmt.Fprintf(w, "file\t%s\n", f.Path)
				}
				for _, c := range m.Containers {
					fmt.Fprintf(w, "container\t%s (image %s, ports %s)\n", c.Name, c.Image, list(c.Ports))
				}
				for _, o := range m.Openings {
					fmt.Fprintf(w, "opening\t%s/%s from %s, %s\n", o.Port, proto(o.Proto), o.From, o.Path)
				}
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "add FILE",
		Short: "Add a module to the catalogue, or update it, from its YAML manifest",
		Long: `Add reads one manifest (one module a file) and records it in the catalogue, so every server
agrees on it. A manifest with problems is refused whole, naming the file, line and field of each;
nothing is stored. A module of the same name is replaced, if every node it is assigned to can still
resolve it with its settings.`,
		Args: exactArgs("FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			src := catalogue.Source{File: filepath.Base(args[0]), Data: string(data)}
			// Check locally first, for the operator's own file name in messages.
			if _, err := catalogue.Parse(src.File, data); err != nil {
				return fmt.Errorf("manifest refused, nothing stored:\n%w", err)
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var m catalogue.Module
			if err := g.client().Post(ctx, "/v1/modules", agent.ModuleAddRequest{Source: src}, &m); err != nil {
				return err
			}
			return g.emit(m, func(w io.Writer) { fmt.Fprintf(w, "module %s recorded in the catalogue\n", m.Name) })
		},
	})
	for _, act := range []struct{ name, short, done string }{
		{"assign", "Assign a module to a node (on an adopted node: prepare; found things are held)", "assigned to"},
		{"unassign", "Unassign a module from a node (held files stay where they are)", "unassigned from"},
		{"take", "Take a module on an adopted node: its cutover; from now on its resources converge", "taken on"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   act.name + " NODE MODULE",
			Short: act.short,
			Args:  exactArgs("NODE", "MODULE"),
			RunE: func(_ *cobra.Command, args []string) error {
				ctx, cancel := g.ctx()
				defer cancel()
				var n fsm.Node
				path := fmt.Sprintf("/v1/nodes/%s/modules/%s/%s", url.PathEscape(args[0]), url.PathEscape(args[1]), act.name)
				if err := g.client().Post(ctx, path, nil, &n); err != nil {
					return err
				}
				return g.emit(n, func(w io.Writer) {
					fmt.Fprintf(w, "module %s %s node %s (%s): assigned %s; taken %s\n", args[1], act.done, n.Name, n.Mode, list(n.Assigned), list(n.EffectiveTaken()))
				})
			},
		})
	}
	return cmd
}

func proto(p string) string {
	if p == "" {
		return "tcp"
	}
	return p
}
