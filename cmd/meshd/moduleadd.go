package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
)

// addCmd is `meshd module add [--privileged] FILE`: one manifest recorded in the catalogue.
func addCmd(g *globals) *cobra.Command {
	var privileged bool
	cmd := &cobra.Command{
		Use:   "add FILE",
		Short: "Add a module to the catalogue, or update it, from its YAML manifest",
		Long: `Add reads one manifest (one module a file) and records it in the catalogue, so every server
agrees on it. A manifest with problems is refused whole, naming the file, line and field of each;
nothing is stored. A module of the same name is replaced, if every node it is assigned to can still
resolve it with its settings.

A module writes files and mounts host paths only in its own places: /etc/NAME, /srv/NAME,
/var/lib/NAME, /var/log/NAME, /opt/NAME and /var/lib/meshd/NAME, where NAME is its name (and not
one of the system's own, such as systemd or ssh). Anything else makes it root on every machine it
is assigned to: such a module must say privileged: true in its manifest, and the operator must say
so too, with --privileged; the record keeps who did, and the history says it.`,
		Args: exactArgs("FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			src := catalogue.Source{File: filepath.Base(args[0]), Data: string(data)}
			// Check locally first, for the operator's own file name in messages.
			m, err := catalogue.Parse(src.File, data)
			switch {
			case err != nil:
			case m.Privileged && !privileged:
				err = fmt.Errorf("module %s says privileged: true: it is root on every machine it is assigned to; "+
					"if you mean it, add it with --privileged", m.Name)
			case !m.Privileged && privileged:
				err = fmt.Errorf("--privileged was given, but module %s does not say privileged: true: a privileged module says so itself", m.Name)
			default:
				err = m.CheckPlaces(nil)
			}
			if err != nil {
				return fmt.Errorf("manifest refused, nothing stored:\n%w", err)
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var added catalogue.Module
			if err := g.client().Post(ctx, "/v1/modules", api.ModuleAddRequest{Source: src, Privileged: privileged}, &added); err != nil {
				return err
			}
			lines := privilegedOf(ctx, g, added.Name, "")
			return g.emit(added, func(w io.Writer) {
				fmt.Fprintf(w, "module %s recorded in the catalogue\n", added.Name)
				for _, line := range lines {
					fmt.Fprintf(w, "PRIVILEGED: %s\n", line)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&privileged, "privileged", false,
		"say that the module may be root on every machine it is assigned to (its manifest says privileged: true); recorded with who said it")
	return cmd
}

// confirmCmd is `meshd module confirm MODULE`: the operator's word on a module the upgrade to the
// allowlist found root-equivalent.
func confirmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "confirm MODULE",
		Short: "Say that a module added before the allowlist may be root on the machines it is assigned to",
		Long: `Modules the record took in before this version are judged again by the allowlist: one that writes
or mounts outside its own places, or says privileged: true, without an operator's word is
unconfirmed. It keeps working where it is assigned, is named by meshd status, module show and the
status page, and may not be assigned anywhere more. Confirm gives the word, recorded with who gave it
and in the history. The other way out is to add the module again in its own places.`,
		Args: exactArgs("MODULE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var grant fsm.Grant
			if err := g.client().Post(ctx, "/v1/modules/"+url.PathEscape(args[0])+"/confirm", struct{}{}, &grant); err != nil {
				return err
			}
			lines := privilegedOf(ctx, g, args[0], "")
			return g.emit(grant, func(w io.Writer) {
				fmt.Fprintf(w, "module %s confirmed privileged by %s\n", args[0], orOperator(grant.By))
				for _, line := range lines {
					fmt.Fprintf(w, "PRIVILEGED: %s\n", line)
				}
			})
		},
	}
}
