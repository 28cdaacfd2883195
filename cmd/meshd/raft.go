package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/agent/raftnode"
	"meshd/api"
	"meshd/pki"
	"meshd/setup"
)

func removePeerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-peer NODE",
		Short: "Take a server out of the Raft group: it stops voting and holding the record",
		Long: `Remove-peer takes server NODE out of the Raft group: the record first says NODE is no longer a
server (committed, so no leader adds it back), then the leader removes it from Raft's configuration.
The node stays in the record as a node. The quorum is counted over the voters left: removing a dead
server from three leaves two voters, whose quorum is both; add a server back to return to three.
The control-node cannot be removed (it leads the group and runs the foundation).

It runs on a server (a follower forwards it to the leader), or anywhere with an operator credential.`,
		Example: `  meshd operator raft remove-peer s3`,
		Args:    exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.RemovePeerView
			if err := g.client().Post(ctx, "/v1/raft/peers/"+args[0]+"/remove", nil, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "server %s removed from the Raft group (record index %d); voters now: %s\n", v.Node, v.Index, strings.Join(v.Voters, ", "))
				if v.Warning != "" {
					fmt.Fprintf(w, "warning: %s\n", v.Warning)
				}
			})
		},
	}
}

func transferLeaderCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "transfer-leader [NODE]",
		Short: "Hand Raft leadership to a server (default: the control-node)",
		Long: `Transfer-leader asks the leader to hand leadership to server NODE, or, without NODE, to the
control-node. The control-node leads whenever it is healthy and its log is current: after a failover
the leader hands leadership back to it by itself; this command does it now. Leadership handed to
another server returns to the control-node once it is current (stop the control-node's agent to keep
it elsewhere, for maintenance).`,
		Example: `  meshd operator raft transfer-leader        # back to the control-node
  meshd operator raft transfer-leader s2`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var in api.TransferRequest
			if len(args) == 1 {
				in.Node = args[0]
			}
			var v api.TransferView
			if err := g.client().Post(ctx, "/v1/raft/transfer-leader", in, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "leadership: %s -> %s\n", v.From, v.To)
				if v.Note != "" {
					fmt.Fprintln(w, v.Note)
				}
			})
		},
	}
}

func recoverCmd(g *globals) *cobra.Command {
	var (
		dataDir string
		keep    []string
		sealKey string
	)
	cmd := &cobra.Command{
		Use:   "recover [--keep NODE,...] [--data-dir DIR] [--seal-key FILE]",
		Short: "Bring back a Raft group that lost its quorum, from the surviving servers",
		Long: `Recover is for a group that lost its quorum for good (two of three servers gone): no leader can
be elected, and every write is refused naming the missing voters. Stop the agent on each surviving
server and run recover there, with the same --keep (the surviving servers by name; default this server
alone): it rewrites the Raft configuration this server holds, through hashicorp/raft's recovery API,
so that the kept servers are the only voters. Then start their agents: they elect a leader among
themselves and writes work again.

Everything in this server's log is kept and counts as committed from then on: also a command that
was never acknowledged, and a command acknowledged by the lost servers but never replicated to this
one is lost. Run it on the survivor with the longest log (its last index is printed) and compare the
record with what was acknowledged (docs/runbook.md says how). Lost servers that come back are added
again as non-voters by the leader; remove-peer takes out the ones gone for good.`,
		Example: `  meshd operator raft recover --data-dir /var/lib/meshd
  meshd operator raft recover --keep s1,s2   # on s1 and on s2, both stopped`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			n, err := setup.ReadNodeFile(dataDir)
			if err != nil {
				return err
			}
			// The log is sealed under the node's seal key: the key that opens its secrets.
			sec, err := pki.OpenNodeSecrets(dataDir, pki.SealKeyPath(sealKey))
			if err != nil {
				return err
			}
			res, err := raftnode.Recover(dataDir, n.RaftSelf(), sec.Seal, keep, os.Stderr)
			if err != nil {
				return err
			}
			return g.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "raft configuration of %s rewritten: voters %s\n", res.Node, strings.Join(res.Voters, ", "))
				if len(res.Dropped) > 0 {
					fmt.Fprintf(w, "dropped\t%s\n", strings.Join(res.Dropped, ", "))
				}
				fmt.Fprintf(w, "log ends at\tindex %d, term %d (everything up to it is kept)\n", res.LastIndex, res.LastTerm)
				fmt.Fprintf(w, "record\tindex %d, %d nodes\n", res.RecordIndex, res.Nodes)
				fmt.Fprintf(w, "\nstart the agent on every kept server: meshd agent --data-dir %s\n", dataDir)
			})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", agent.DefaultDataDir, "the stopped server's data dir")
	cmd.Flags().StringVar(&sealKey, "seal-key", "", "the seal key file the node's Raft log is sealed under (default $MESHD_SEAL_KEY, else /etc/meshd/seal.key)")
	cmd.Flags().StringSliceVar(&keep, "keep", nil, "the surviving servers to keep as voters, by node name (default: this server)")
	return cmd
}
