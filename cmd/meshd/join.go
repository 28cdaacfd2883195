package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/fsm"
	"meshd/setup"
)

// joinCmd declares the join command; long only for its help text and flags, not for logic.
func joinCmd(g *globals) *cobra.Command {
	var (
		opts      setup.JoinOptions
		ports     []string
		tokenFile string
		adopted   bool
		converged bool
	)
	cmd := &cobra.Command{
		Use:   "join TOKEN|--token-file FILE|--dry-run --adopted|--converged --name NAME [--data-dir DIR] [--advertise IP] [--port KEY=N ...] [--tunnel IFACE] [--dry-run] [--seal-key FILE]",
		Short: "Enrol this machine in a mesh with a token, as a client node or (with a server token) a server",
		Long: `Join enrols this machine with a token from ` + "`meshd token create`" + `. It checks the token's form, then
runs genesis's preflight on this machine before anything is sent: every port this node will bind (its
bus, gossip and tunnel ports) free, a held one named with its holder; the found firewall one meshd
speaks (firewalld or an unreadable one is refused, adopted or not); and, for a converged token, a
machine in use (an active firewall, anything listening on a non-loopback address, a published
container port) refused and named: a converged node's first pass would close it. Join it with a token
made by ` + "`meshd token create --adopted`" + ` instead. A join refused there sends nothing and writes nothing,
so its token stays unused. --dry-run runs the preflight alone and shows the settings the enrolment
would send (--json for scripts); it needs no token and spends none: say the mode a token would
carry with --adopted or --converged (and --server for a server's). A token given to a dry run is
only read, for its form, expiry and mode; it is never sent, so it stays unused and valid.

The ports are inputs, as at genesis: --port gossip=17946, --port bus=17170, --port tunnel=51821 become
the node's settings in the record, and its agent binds them.

Then it reaches a server's bus named in the token trusting only the mesh CA the token names, checks the token's signature
with that CA, makes the node's identity key and enrols: the server answers once the record committed
the node, with the node's certificate, the CA's, the gossip key, its private address and mode (the
token's), and its first declaration. Only then is the data dir written, its secrets sealed under the
seal key (made if there is none; its recovery code is printed this once).

With a token made by ` + "`meshd token create --server`" + ` the machine joins as a server: its preflight
checks its Raft port too (--port raft=N), the enrolment also brings the mesh CA key (sealed here like
the control-node's: every server enrols nodes and signs tokens), and once its agent starts the leader
adds it to the Raft group as a non-voter, then makes it a voter when its log has been current for a
moment. Three or five servers are the shapes to run; an even count is warned about.

A used, expired, forged or truncated token is refused with the reason; nothing changes here or in the
record. Start the node with ` + "`meshd agent --data-dir DIR`" + `.

The keys are made, and kept sealed in the data dir (join.pending), before the enrolment is sent. If
its answer is lost (the server took longer than join waits, the connection dropped), join says so
and keeps them: run the same join again, same token and --name, on the same machine, and the server
answers it as it answered the first time (the same address, the same certificate) instead of
"token already used". Every enrolment is signed with the node's identity key, and a used token
enrols only the node it enrolled, signed by that node's key: anyone else holding the token (and the
node's public key, which its certificate shows) is refused. The mesh CA key travels in a server's
first answer only: a server whose first answer was lost cannot finish; remove the node and join with
a new server token, as join then says.

Give the token with --token-file FILE, or --token-file - to paste or pipe it on standard input. A
token on the command line still works but is warned about: every user of the machine can read it
(ps) while join runs.`,
		Example: `  meshd join --token-file token.txt --name edge-1 --advertise 192.0.2.2
  meshd join --name edge-1 --adopted --port tunnel=51821 --dry-run
  meshd join --token-file - --name edge-1 < token.txt`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			given := ""
			if len(args) == 1 {
				given = args[0]
			}
			if adopted && converged {
				return errors.New("--adopted or --converged: a token carries one mode")
			}
			if adopted {
				opts.Preview.Mode = string(fsm.Adopted)
			} else if converged {
				opts.Preview.Mode = string(fsm.Converged)
			}
			if !opts.DryRun || given != "" || tokenFile != "" {
				opts.Token, err = secretFrom("token", given, "TOKEN", tokenFile, "--token-file", cmd.InOrStdin())
				if err != nil {
					return err
				}
			}
			if given != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), tokenArgWarning)
			}
			if opts.Ports, err = keyValues("--port", ports); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			res, err := setup.Join(ctx, opts)
			var pe *setup.PreflightError
			if errors.As(err, &pe) && g.json {
				_ = g.emit(map[string]any{"ok": false, "findings": pe.Findings}, nil)
				return errors.New("join refused by its preflight; nothing was sent")
			}
			if err != nil {
				return err
			}
			if res.DryRun {
				return g.emit(map[string]any{"ok": true, "findings": res.Findings, "dry_run": true, "mode": res.Mode, "tunnel": res.Tunnel,
					"name": opts.Name, "settings": res.Settings, "token_sent": false}, func(w io.Writer) {
					fmt.Fprintf(w, "preflight passed for %s join; nothing was sent or changed, no token spent (--dry-run)\n", withArticle(string(res.Mode)))
					if len(res.Settings) > 0 {
						fmt.Fprintf(w, "settings it would send\t%s\n", settingsText(res.Settings))
					}
					printFindings(w, res.Findings)
					printTunnelFields(w, tunnelPresented(opts.Tunnel), res.Tunnel)
				})
			}
			return g.emit(res, func(w io.Writer) {
				printFindings(w, res.Findings)
				printTunnelFields(w, tunnelPresented(opts.Tunnel), res.Tunnel)
				n := res.Node
				if res.Resumed {
					fmt.Fprintf(w, "the enrolment sent earlier was answered now: the server had enrolled node %s with this machine's kept keys\n", n.Name)
				}
				if n.Server {
					fmt.Fprintf(w, "joined: node %s, %s, a server beside %s; it joins Raft as a non-voter and votes once its log is current\n", n.Name, modeWord(n.Mode), list(res.Servers))
				} else {
					fmt.Fprintf(w, "joined: node %s, %s, a client of %s\n", n.Name, modeWord(n.Mode), list(res.Servers))
				}
				fmt.Fprintf(w, "id\t%s\n", n.ID)
				fmt.Fprintf(w, "data dir\t%s\n", res.DataDir)
				fmt.Fprintf(w, "private address\t%s\n", n.Address)
				if n.FoundTunnel != "" {
					fmt.Fprintf(w, "wireguard key\t%s (its found tunnel %s's, which keeps carrying its traffic)\n", n.WireGuardKey, n.FoundTunnel)
				} else if n.WireGuardKey != "" {
					fmt.Fprintf(w, "wireguard key\t%s (made here; its agent raises %s with it)\n", n.WireGuardKey, fsm.MeshInterface)
				}
				if len(n.Settings) > 0 {
					fmt.Fprintf(w, "settings\t%s\n", settingsText(n.Settings))
				}
				fmt.Fprintf(w, "seal key\t%s\n", res.SealKey)
				printRecoveryCode(w, res.RecoveryCode, res.SealKey)
				fmt.Fprintf(w, "\n%s\n", startHint(res.DataDir))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Name, "name", "", "this node's name (required)")
	f.StringVar(&tokenFile, "token-file", "", "read the token from FILE's first line (- for standard input) instead of the command line")
	f.StringVar(&opts.DataDir, "data-dir", agent.DefaultDataDir, "where the node keeps its identity and keys")
	f.StringVar(&opts.Advertise, "advertise", "", "this node's underlay address (default: the address the server sees it at)")
	f.StringVar(&opts.Tunnel, "tunnel", "", "the machine's found WireGuard interface (a predecessor's tunnel): its key is presented so the node keeps its tunnel address")
	f.StringVar(&opts.SealKey, "seal-key", "", "the seal key file (default $MESHD_SEAL_KEY, else /etc/meshd/seal.key)")
	f.StringArrayVar(&ports, "port", nil, "a port this node binds, KEY=N (bus, gossip, tunnel; raft with a server token; repeatable)")
	f.StringVar(&opts.DockerHost, "docker-host", "", "the Docker engine, for published ports (default unix:///var/run/docker.sock)")
	f.BoolVar(&opts.DryRun, "dry-run", false, "run the preflight only: send nothing, change nothing; no token needed")
	f.BoolVar(&adopted, "adopted", false, "--dry-run without a token: preview an adopted join (a token made with --adopted)")
	f.BoolVar(&converged, "converged", false, "--dry-run without a token: preview a converged join")
	f.BoolVar(&opts.Preview.Server, "server", false, "--dry-run without a token: preview a server's join (a token made with --server)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// settingsText is a node's settings as KEY=VALUE, sorted.
func settingsText(s map[string]string) string {
	var kv []string
	for _, k := range sortedKeys(s) {
		kv = append(kv, k+"="+s[k])
	}
	return strings.Join(kv, " ")
}

// tokenArgWarning is what join says on standard error when the token is its argument.
const tokenArgWarning = "warning: a token on the command line can be read by every local user " +
	"(ps, /proc/PID/cmdline) while join runs; give it with --token-file FILE, or --token-file - on standard input"

// printRecoveryCode shows the seal key's recovery code, the one time it exists outside the key.
func printRecoveryCode(w io.Writer, code, keyFile string) {
	if code == "" {
		fmt.Fprintf(w, "sealed with the existing seal key %s (its recovery code was shown when it was made)\n", keyFile)
		return
	}
	fmt.Fprintf(w, "\nRECOVERY CODE\t%s\n", code)
	fmt.Fprintf(w, "\tkeep it offline: it is shown only now. If %s is lost, restore it with\n", keyFile)
	fmt.Fprintf(w, "\tmeshd operator seal-key restore --recovery-code-file - --seal-key %s   (then type the code)\n", keyFile)
}

// withArticle puts "a" or "an" before a word: "an adopted join", "a converged join".
func withArticle(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// tunnelPresented heads the preview of a tunnel join presents: it keeps running untouched until
// `meshd tunnel take` takes it over.
func tunnelPresented(iface string) string {
	return iface + " as read, beside what `meshd tunnel take` will raise in its place (until then it runs untouched)"
}
