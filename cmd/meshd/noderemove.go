package main

import (
	"fmt"
	"io"
	"meshd/api"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

func nodeRemoveCmd(g *globals) *cobra.Command {
	var quarantine time.Duration
	cmd := &cobra.Command{
		Use:   "remove NODE [--quarantine 24h]",
		Short: "Take a node out of the mesh for good: out of the record, its certificate revoked, its address quarantined",
		Long: `Remove takes NODE out of the record. From the moment the record commits it:
  - its certificate is revoked: the bus and Raft refuse the node's key, whatever name a
    certificate for it carries, and no enrolment may use that key again;
  - its private-network address is quarantined: no new enrolment gets it before --quarantine
    has passed (default 24h), so nothing that still knows the old node by its address reaches
    a new machine there by mistake;
  - a server leaves the Raft group as well (the voters left are printed).
The machine itself is not touched: stop its agent, and join it again with a new token if it is
to come back (it gets a new key and, within the quarantine, another address).

Refused: the control-node (it holds the foundation and the private network's hub), the node
whose agent leads the Raft group (hand leadership elsewhere first with ` + "`meshd operator raft transfer-leader`" + `),
and the last server. It runs on a server (a follower forwards it to the leader), or anywhere with an operator credential.`,
		Example: `  meshd node remove peer2
  meshd node remove peer2 --quarantine 168h --json`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if quarantine < 0 {
				return fmt.Errorf("--quarantine %s: give zero or more, such as 24h", quarantine)
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.NodeRemoveView
			if err := g.client().Post(ctx, "/v1/nodes/"+url.PathEscape(args[0])+"/remove", api.NodeRemoveRequest{Quarantine: quarantine.String()}, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "node %s removed from the record (index %d)\n", v.Node, v.Index)
				fmt.Fprintf(w, "  certificate\trevoked (key %s)\n", v.RevokedKey)
				if v.Address != "" {
					fmt.Fprintf(w, "  address\t%s quarantined until %s\n", v.Address, v.QuarantineUntil.Format(time.RFC3339))
				}
				if v.Server {
					fmt.Fprintf(w, "  raft\tout of the group; voters now: %v\n", v.Voters)
				}
				if v.Warning != "" {
					fmt.Fprintf(w, "warning: %s\n", v.Warning)
				}
			})
		},
	}
	cmd.Flags().DurationVar(&quarantine, "quarantine", api.DefaultQuarantine, "how long the node's private-network address is given to no new enrolment")
	return cmd
}
