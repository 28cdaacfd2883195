package main

import (
	"fmt"
	"io"
	"meshd/api"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func membersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "Show this node's gossip view: every member, its address, state (alive, failed, left, removed) and since when",
		Long: `Members lists the mesh's gossip members as this node's agent sees them. A member that stopped
answering is "failed" once memberlist's suspicion timer ran out; one that ran ` + "`meshd leave`" + ` is "left"
at once; one whose node was taken out with ` + "`meshd node remove`" + ` is "removed" at once, whether or not
its agent still runs: its identity key is revoked, so the reports it signed are dropped, the ones
it sends after are rejected, and no member takes it for a peer again (a new enrolment under its
name, with a new key, is a member like any other). The reports this node rejected (signed by a key
that is not the node's, or a revoked one) are counted.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.MembersView
			if err := g.client().Get(ctx, "/v1/members", &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				if !v.Running {
					fmt.Fprintf(w, "node %s: gossip is not running (see the agent's log)\n", v.Node)
					return
				}
				fmt.Fprintln(w, "MEMBER\tADDRESS\tSTATE\tSINCE")
				for _, m := range v.Members {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.Name, m.Address, m.State, m.Since.Format(time.RFC3339))
				}
				if len(v.Rejected) > 0 {
					var parts []string
					for r, n := range v.Rejected {
						parts = append(parts, fmt.Sprintf("%s %d", r, n))
					}
					sort.Strings(parts)
					fmt.Fprintf(w, "\nrejected reports\t%s\n", strings.Join(parts, ", "))
				}
			})
		},
	}
}

func leaveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "leave",
		Short: "Leave the mesh's gossip gracefully and stop this node's agent",
		Long: `Leave tells every member, signed with this node's identity, that it leaves on purpose, waits for
their acknowledgement, leaves memberlist and stops the agent. The others record the node as "left"
at once, not "failed". The node stays in the record; starting its agent again brings it back.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var out map[string]any
			if err := g.client().Do(ctx, http.MethodPost, "/v1/leave", nil, &out); err != nil {
				return err
			}
			return g.emit(out, func(w io.Writer) {
				fmt.Fprintf(w, "node %v left the mesh's gossip; its agent stops\n", out["node"])
			})
		},
	}
}
