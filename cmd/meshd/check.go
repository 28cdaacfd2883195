package main

import (
	"errors"
	"fmt"
	"io"
	"meshd/api"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

func checkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "check", Short: "Check the mesh's connectivity"}
	cmd.AddCommand(&cobra.Command{
		Use:   "reach NODE",
		Short: "Tell which of the bus (tcp) and gossip (tcp, udp) ports between this node and NODE is blocked, and which way",
		Long: `Reach probes NODE's bus port (tcp) and gossip port (tcp and udp) from this node, then asks NODE over
the bus to probe this node's, so each port is checked in each direction: this node → NODE and
NODE → this node. A blocked port is named with its number, address and direction; the command
exits 1 when any is blocked.`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.ReachView
			if err := g.client().Get(ctx, "/v1/reach/"+url.PathEscape(args[0]), &v); err != nil {
				return err
			}
			err := g.emit(v, func(w io.Writer) {
				fmt.Fprintln(w, "FROM\tTO\tPORT\tADDRESS\tRESULT")
				for _, c := range v.Checks {
					res := "reachable"
					if !c.OK {
						res = "BLOCKED: " + c.Error
					}
					fmt.Fprintf(w, "%s\t%s\t%s %s %d\t%s\t%s\n", c.From, c.To, c.Port, c.Proto, c.Number, c.Address, res)
				}
				if v.Reverse != "" {
					fmt.Fprintf(w, "\n%s\n", v.Reverse)
				}
				if len(v.Blocked) == 0 && v.Reverse == "" {
					fmt.Fprintf(w, "\nall reachable: %s ⇄ %s on the bus and gossip ports\n", v.From, v.To)
				}
			})
			if err != nil {
				return err
			}
			if len(v.Blocked) > 0 {
				return errors.New(strings.Join(v.Blocked, "; "))
			}
			if v.Reverse != "" {
				return errors.New(v.Reverse)
			}
			return nil
		},
	})
	return cmd
}
