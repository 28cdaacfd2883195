package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/pki"
	"meshd/report"
)

// credentialEnv names the operator credential file when --credential does not.
const credentialEnv = "MESHD_CREDENTIAL"

// client is the operator's client: the local agent's socket, or, with --credential (or
// MESHD_CREDENTIAL), a server's bus over mTLS with that operator credential.
func (g *globals) client() *api.Client {
	if g.credential == "" {
		g.last = api.NewClient(g.socket)
	} else if cred, err := readCredential(g.credential); err != nil {
		g.last = &api.Client{Err: err}
	} else {
		g.last = api.NewBusClient(cred.Name, cred.Bus, cred.TLS())
	}
	g.last.Stale = g.stale
	return g.last
}

// readCredential reads an operator credential file, refusing one that other users may read.
func readCredential(path string) (*pki.Credential, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("operator credential (--credential, $%s): %w", credentialEnv, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("operator credential %s is readable by others (mode %04o): it holds a private key; chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("operator credential: %w", err)
	}
	cred, err := pki.ParseCredential(b)
	if err != nil {
		return nil, fmt.Errorf("operator credential %s: %w", path, err)
	}
	if len(cred.Bus) == 0 {
		return nil, fmt.Errorf("operator credential %s lists no server's bus address: make a new one on a server", path)
	}
	return cred, nil
}

func credentialCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "credential",
		Short: "Operator credentials: drive the mesh from a machine that is not a server",
		Long: `An operator credential is a certificate the mesh CA issues to a person (or a CI job), not to a
machine: with it, meshd on any machine that reaches a server's bus port (a laptop, a bastion) talks
to the servers directly over mTLS, instead of to a local agent's socket:

  meshd --credential ./ops-laptop.credential status
  export MESHD_CREDENTIAL=$HOME/.meshd/ops-laptop.credential    # then every command uses it

Who may change the record: root on a server's operator socket, and an operator credential the
record lists, unrevoked and unexpired. A client node's certificate is no operator: on a client
machine, record commands are refused unless given a credential. The record keeps which credential
(or which server's socket) gave each command.

Create one on a server, list them, and revoke one the moment it may have leaked: the servers
refuse it from their next request on.`,
	}
	cmd.AddCommand(credentialCreateCmd(g), credentialListCmd(g), credentialRevokeCmd(g))
	return cmd
}

func credentialCreateCmd(g *globals) *cobra.Command {
	var (
		name string
		ttl  time.Duration
		out  string
	)
	c := &cobra.Command{
		Use:   "create --name NAME [--ttl 720h] [--out FILE]",
		Short: "Issue an operator credential and write it to a file (0600)",
		Long: `Credential create has a server issue an operator credential with the mesh CA key it holds, as it
signs enrolment tokens: a certificate for NAME (lower-case letters, digits, '.', '_', '-'), good for
--ttl (at most a year), and its private key. The record lists it by its certificate's serial; the
file holds the certificate, the key, the mesh CA and the servers' bus addresses, and is written 0600
to --out (default ./NAME.credential). An existing file is never overwritten. The private key exists
only in that file: keep it as you keep an ssh key.

Run it on a server as root (or anywhere with a credential already). Give one credential to each
person or job, named after it, so the record says who did what and one can be revoked alone.`,
		Example: `  meshd operator credential create --name ops-laptop --ttl 720h
  scp ops-laptop.credential laptop:.meshd/ && rm ops-laptop.credential
  meshd --credential ~/.meshd/ops-laptop.credential status      # on the laptop`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := pki.CheckOperatorName(name); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			if out == "" {
				out = "./" + name + ".credential"
			}
			if _, err := os.Lstat(out); err == nil {
				return fmt.Errorf("%s exists: a credential file is never overwritten; give --out another path, or remove it first", out)
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.CredentialIssued
			if err := g.client().Post(ctx, "/v1/operator/credentials", api.CredentialRequest{Name: name, TTL: ttl.String()}, &v); err != nil {
				return err
			}
			if err := writeNew(out, []byte(v.File)); err != nil {
				return fmt.Errorf("operator credential %s is in the record but its file was not written: %w; revoke it (meshd operator credential revoke %s) and create another", name, err, name)
			}
			abs, _ := filepath.Abs(out)
			if g.json {
				v.File = ""
				return g.emit(struct {
					api.CredentialView
					Path string   `json:"path"`
					Bus  []string `json:"bus"`
				}{v.Credential, abs, v.Bus}, nil)
			}
			fmt.Fprintf(g.out, "wrote operator credential %s (id %s, expires %s) to %s\n", name, v.Credential.ID, v.Credential.Expires.Format(time.RFC3339), abs)
			fmt.Fprintf(g.out, "the file holds its private key (mode 0600): copy it to the machine it is for, then remove it here\n\n")
			fmt.Fprintf(g.out, "use it from any machine that reaches a server's bus (%s):\n", list(v.Bus))
			fmt.Fprintf(g.out, "  meshd --credential %s status\n  export %s=%s\n", abs, credentialEnv, abs)
			fmt.Fprintf(g.out, "revoke it with: meshd operator credential revoke %s\n", name)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "the credential's name: who or what uses it (ops-laptop, ci-deploy)")
	c.Flags().DurationVar(&ttl, "ttl", 720*time.Hour, "how long it is good for (at most 8784h, a year)")
	c.Flags().StringVar(&out, "out", "", "the file to write (default ./NAME.credential); never overwritten")
	_ = c.MarkFlagRequired("name")
	return c
}

// writeNew writes b to a new file at path, 0600, refusing one that exists.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func credentialListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the operator credentials the record holds, revoked and expired ones included",
		Long: `Credential list shows each operator credential the record holds: its name, its state (active,
revoked, expired), its certificate's id, when it expires, when and by whom it was made, and, when
revoked, when and by whom.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var cs []api.CredentialView
			if err := g.client().Get(ctx, "/v1/operator/credentials", &cs); err != nil {
				return err
			}
			return g.emit(cs, func(w io.Writer) {
				if len(cs) == 0 {
					fmt.Fprintln(w, "no operator credentials (meshd operator credential create --name NAME makes one)")
					return
				}
				fmt.Fprintln(w, "NAME\tSTATE\tID\tEXPIRES\tCREATED\tBY\tREVOKED")
				for _, c := range cs {
					rev := "-"
					if c.Revoked() {
						rev = c.RevokedAt.Format(time.RFC3339) + " by " + report.OrDash(c.RevokedBy)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.State, c.ID, c.Expires.Format(time.RFC3339),
						c.Created.Format(time.RFC3339), report.OrDash(c.CreatedBy), rev)
				}
			})
		},
	}
}

func credentialRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke an operator credential: the servers refuse it at once",
		Long: `Credential revoke marks the operator credential NAME revoked in the record: every server refuses it
from its next request on, naming it revoked. It cannot be undone; create a new credential (the name
may be used again) for whoever still needs one.`,
		Example: `  meshd operator credential revoke ops-laptop`,
		Args:    exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.CredentialView
			if err := g.client().Post(ctx, "/v1/operator/credentials/"+args[0]+"/revoke", nil, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "operator credential %s (id %s) revoked at %s by %s: the servers refuse it\n", v.Name, v.ID, v.RevokedAt.Format(time.RFC3339), report.OrDash(v.RevokedBy))
			})
		},
	}
}
