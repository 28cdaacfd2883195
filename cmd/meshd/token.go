package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
)

func tokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Enrolment tokens: make one for a machine to join with"}
	var (
		adopted, converged bool
		server             bool
		ttl                time.Duration
	)
	create := &cobra.Command{
		Use:   "create --adopted|--converged [--server] [--ttl 1h]",
		Short: "Print a signed, single-use, expiring token for `meshd join`",
		Long: `Token create asks this server for an enrolment token: signed by the mesh CA, good for one join,
until --ttl passes. It carries the joining node's mode, which you must say: --adopted (what is found on
the machine is held until each module is taken: for a machine already serving) or --converged (meshd's
filter replaces the machine's firewall on its first pass: for an idle machine; join refuses it on a
machine in use). There is no default: a forgotten flag must neither close a working machine nor leave
one adopted by accident. The token also carries the servers' bus addresses (each server's advertise
address and mesh.bus port), the private network's range (join's preflight checks it), and the CA's
fingerprint, so the joining machine trusts only this mesh's servers. The record keeps only the
token's hash: the token is printed this once.

With --server the token enrols a server: the machine joins the Raft group as a non-voter, catches up,
and becomes a voter once its log is current; it also receives the mesh CA key. Run three or five
servers: with an even count the token says so (a quorum of 2 of 2 survives no loss at all).

Run it on a server (a follower forwards it to the leader) or anywhere with --credential; give the token to ` + "`meshd join`" + ` on the new machine.`,
		Example: `  meshd token create --adopted --ttl 30m
  meshd token create --converged               # for an idle machine
  meshd token create --adopted --server        # a second or third server
  meshd token create --adopted > token.txt                      # carry it over privately
  meshd join --token-file token.txt --name edge-1               # on the new machine`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var mode fsm.Mode
			switch {
			case adopted && converged:
				return errors.New("token create: give --adopted or --converged, not both")
			case adopted:
				mode = fsm.Adopted
			case converged:
				mode = fsm.Converged
			default:
				return errors.New("token create needs the joining node's mode: --adopted for a machine already serving " +
					"(what is found is held until each module is taken), or --converged for an idle one " +
					"(meshd's filter replaces its firewall; join refuses it on a machine in use)")
			}
			var v api.TokenView
			if err := g.client().Post(ctx, "/v1/tokens", api.TokenRequest{Mode: mode, TTL: ttl.String(), Server: server}, &v); err != nil {
				return err
			}
			if g.json {
				return g.emit(v, nil)
			}
			// The token alone on stdout, so $(meshd token create) is the token.
			fmt.Fprintln(g.out, v.Token)
			if v.Warning != "" {
				fmt.Fprintf(os.Stderr, "warning: with this server the group has %s\n", v.Warning)
			}
			return nil
		},
	}
	create.Flags().BoolVar(&adopted, "adopted", false, "the joining node is adopted: what is found on it is held until each module is taken")
	create.Flags().BoolVar(&converged, "converged", false, "the joining node is converged: meshd's filter replaces its firewall (an idle machine)")
	create.Flags().BoolVar(&server, "server", false, "the token enrols a server: it joins the Raft group and holds the record")
	create.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is good for")
	cmd.AddCommand(create)
	return cmd
}

func sealKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "seal-key", Short: "The seal key the node's secrets are sealed under"}
	var code, codeFile, file, dataDir string
	restore := &cobra.Command{
		Use:   "restore --recovery-code CODE|--recovery-code-file FILE [--seal-key FILE] [--data-dir DIR]",
		Short: "Restore a lost or replaced seal key file from its recovery code",
		Long: `The node's secrets (the mesh CA key on a server, its identity key, the gossip keyring) are sealed
at rest under the seal key, a file kept apart from the data dir (default ` + pki.DefaultSealKeyFile + `;
--seal-key or MESHD_SEAL_KEY). Without the right seal key the agent refuses to start. Restore writes the
key back from the recovery code printed once by genesis or join, after checking that the code opens
the node's secrets in --data-dir. The agent needs no other change: start it again.

A code on the command line can be read by every user of the machine while the command runs; give it
with --recovery-code-file FILE, or --recovery-code-file - to type or pipe it on standard input.`,
		Example: `  meshd operator seal-key restore --recovery-code-file - --data-dir /var/lib/meshd`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			code, err := secretFrom("recovery code", code, "--recovery-code", codeFile, "--recovery-code-file", cmd.InOrStdin())
			if err != nil {
				return err
			}
			path := pki.SealKeyPath(file)
			if err := pki.RestoreSealKey(code, path, dataDir); err != nil {
				return fmt.Errorf("seal key %s not restored: %w", path, err)
			}
			return g.emit(map[string]any{"restored": path, "data_dir": dataDir}, func(w io.Writer) {
				fmt.Fprintf(w, "seal key restored to %s (it opens the node in %s); start the agent again\n", path, dataDir)
			})
		},
	}
	restore.Flags().StringVar(&code, "recovery-code", "", "the recovery code genesis or join printed (or --recovery-code-file)")
	restore.Flags().StringVar(&codeFile, "recovery-code-file", "", "read the recovery code from FILE's first line (- for standard input)")
	restore.Flags().StringVar(&file, "seal-key", "", "the seal key file to write (default $MESHD_SEAL_KEY, else "+pki.DefaultSealKeyFile+")")
	restore.Flags().StringVar(&dataDir, "data-dir", agent.DefaultDataDir, "the node's data dir, whose secrets the code must open")
	cmd.AddCommand(restore)
	return cmd
}
