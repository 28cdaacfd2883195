package main

import (
	"errors"
	"fmt"
	"io"
	"meshd/api"
	"strings"

	"github.com/spf13/cobra"
)

func keyringCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keyring",
		Short: "List and rotate the gossip keys on every node, without a restart",
		Long: `The gossip key encrypts every gossip message. Rotate it on a running mesh in three steps, each
run on a server, which applies it on every node over the bus and has each node re-seal its keyring:

  meshd keyring install          # makes a key, prints it once, installs it everywhere
  meshd keyring use KEY          # every node encrypts with it (refused until all have it)
  meshd keyring remove OLDKEY    # (refused while any node still uses it)

Keys are listed by fingerprint, never shown.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List every node's gossip keys by fingerprint, the primary marked",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var res api.KeyringResult
			if err := g.client().Get(ctx, "/v1/keyring", &res); err != nil {
				return err
			}
			return keyringOut(g, res)
		},
	})
	for _, op := range []struct{ name, short string }{
		{"install", "Install a gossip key on every node (with no KEY, make one and print it once)"},
		{"use", "Make an installed key the one every node encrypts with"},
		{"remove", "Remove a key no node uses from every node"},
	} {
		use := op.name + " KEY"
		args := exactArgs("KEY")
		if op.name == "install" {
			use = "install [KEY]"
			args = cobra.MaximumNArgs(1)
		}
		cmd.AddCommand(&cobra.Command{
			Use:   use,
			Short: op.short,
			Args:  args,
			RunE: func(_ *cobra.Command, a []string) error {
				ctx, cancel := g.ctx()
				defer cancel()
				req := api.KeyringRequest{Op: op.name}
				if len(a) > 0 {
					req.Key = a[0]
				}
				var res api.KeyringResult
				if err := g.client().Post(ctx, "/v1/keyring", req, &res); err != nil {
					return err
				}
				return keyringOut(g, res)
			},
		})
	}
	return cmd
}

func keyringOut(g *globals, res api.KeyringResult) error {
	err := g.emit(res, func(w io.Writer) {
		if res.Key != "" {
			fmt.Fprintf(w, "NEW GOSSIP KEY\t%s\t(shown this once; `meshd keyring use` it once every node has it)\n\n", res.Key)
		}
		if res.Op != "" {
			fmt.Fprintf(w, "%s key %s\n\n", res.Op, res.KeyID)
		}
		fmt.Fprintln(w, "NODE\tKEYS (primary first)\tERROR")
		for _, m := range res.Members {
			var ks []string
			for _, k := range m.Keys {
				if k.Primary {
					ks = append([]string{k.ID + " (primary)"}, ks...)
				} else {
					ks = append(ks, k.ID)
				}
			}
			e := m.Error
			if e == "" {
				e = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", m.Node, list(ks), e)
		}
	})
	if err != nil {
		return err
	}
	if len(res.Failed) > 0 {
		return errors.New("keyring: not done on node(s) " + strings.Join(res.Failed, ", ") + " (see the ERROR column)")
	}
	return nil
}
