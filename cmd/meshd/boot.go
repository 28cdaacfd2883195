package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/netfilter"
	"meshd/setup"
)

// bootCmd is `meshd boot`: what the meshd-boot unit runs early at boot.
func bootCmd(g *globals) *cobra.Command {
	var dataDir string
	var install bool
	cmd := &cobra.Command{
		Use:   "boot [--data-dir DIR] [--install-unit]",
		Short: "Load meshd's own firewall table at boot, before the container engine publishes ports",
		Long: `A reboot empties the kernel's tables, and a machine's boot starts the container engine, which
publishes every port of a container with a restart policy on every address, before meshd's agent
has made its first pass. On an adopted node the guard is what keeps the store and the broker from
anyone off the private network; on a converged node the derived filter is its whole firewall. So the
agent keeps the table it last loaded in DATA/netfilter/` + netfilter.BootFile + `, and ` + "`meshd boot`" + ` loads it
again, exactly as it was, from the meshd-boot unit (` + setup.BootUnitName + `): after the found firewall
(so a flush in /etc/nftables.conf cannot drop it), before the container engine and the agent.

An agent run by systemd writes and enables that unit itself; --install-unit writes it by hand (for
this binary and --data-dir). A node whose agent never loaded a table has nothing kept: boot says so
and succeeds (a boot is never failed for it). The agent, once it runs, takes over from there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if install {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				if exe, err = filepath.EvalSymlinks(exe); err != nil {
					return err
				}
				wrote, err := setup.InstallBootUnit("/", exe, dataDir)
				if err != nil {
					return err
				}
				unit := "/etc/systemd/system/" + setup.BootUnitName
				return g.emit(map[string]any{"unit": unit, "wrote": wrote}, func(w io.Writer) {
					if wrote {
						fmt.Fprintf(w, "wrote and enabled %s (runs %s boot --data-dir %s)\n", unit, exe, dataDir)
					} else {
						fmt.Fprintf(w, "%s is already written and enabled\n", unit)
					}
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			loaded, err := netfilter.LoadForBoot(ctx, netfilter.Env{StateDir: filepath.Join(dataDir, "netfilter")})
			if errors.Is(err, netfilter.ErrNothingKept) {
				return g.emit(map[string]any{"loaded": "", "nothing_kept": err.Error()}, func(w io.Writer) {
					fmt.Fprintf(w, "nothing to load: %v (the agent keeps its table there once it has loaded one)\n", err)
				})
			}
			if err != nil {
				return err
			}
			return g.emit(map[string]any{"loaded": loaded}, func(w io.Writer) {
				fmt.Fprintf(w, "loaded %s, as the agent last loaded it\n", loaded)
			})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", agent.DefaultDataDir, "the node's data dir (its netfilter/"+netfilter.BootFile+" is read)")
	cmd.Flags().BoolVar(&install, "install-unit", false, "write and enable the "+setup.BootUnitName+" unit instead of loading")
	return cmd
}
