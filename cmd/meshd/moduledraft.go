package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/container"
	"meshd/draft"
	"meshd/fsm"
	"meshd/netfilter"
	"meshd/netfilter/reach"
	"meshd/report"
)

// draftCmd is `meshd module draft NODE [CONTAINER...]`: manifests written from what runs on the
// machine, one a module.
func draftCmd(g *globals) *cobra.Command {
	var out, dockerHost string
	var files []string
	var preview, noContainers bool
	cmd := &cobra.Command{
		Use:   "draft NODE [CONTAINER...] --out DIR [--file [MODULE=]PATH]... [--preview]",
		Short: "Write module manifests from the containers and files found on this machine",
		Long: `Draft writes a manifest for what runs on this machine (NODE, the node its agent is): every
container (or those named), each exactly as it runs: its image by the reference it was created
with (the image id it runs is checked to be what the reference names now), command, env, ports,
volumes, restart policy, labels, and the rest of the container vocabulary (user, networks with
aliases and addresses, capabilities, limits, health check, logging...). Containers of one Compose
project (label com.docker.compose.project) are one module; any other container is a module of its
own. Each host port is a setting of its module (meshd node set NODE MODULE.SETTING=PORT moves it).
A module is never named as one the catalogue has (adding it would replace that one): it is NAME-2
instead.

Each port published beyond loopback gets the openings the machine's found firewall gives it, never
more: draft reads the ruleset (iptables and ip6tables, either backend, with ufw's and Docker's
chains, and nftables) and follows a new connection from outside through Docker's DNAT and every
forwarding filter. A port anywhere reaches is opened forwarded from anywhere; one the firewall
keeps to some networks gets one opening from each (192.168.0.0/16; 0.0.0.0/0 when all of IPv4 but
no IPv6 reaches it); one nobody outside reaches gets none, and the preview says "no opening: ...
closed by the found firewall (RULE)". A rule the answer depends on that draft cannot read (an
ipset, a mark, an interface other than loopback or a container bridge, firewalld's zones) refuses
the draft, naming the rule. --file PATH adds a file as it is on the machine (content,
mode, owner) to MODULE, or to NODE-files. Left out, each named: containers meshd created, those a
module declares already (the node's latest report says which), those a take keeps aside, and
those whose name a module of the catalogue declares (assign that module here to hold them).

A draft is exact or refused: what a manifest cannot reproduce (a setting no manifest can say, such
as --ipc host; an image reference that now names another image than the one running; an env value
with ${...}; a port whose reach cannot be read) is named, node, container and field, and nothing is
written. Each manifest is parsed
back with the catalogue, and says privileged: true (with why, in the preview) when it is root on
the machine.

The files go to --out DIR, one NAME.yaml a module, mode 0600: env values are kept as found, so
keep them as private as the machine's own configuration. An existing file is never overwritten.
--preview writes nothing and lists what each module would hold, env variables by name only; then
review, add (meshd module add [--privileged] DIR/NAME.yaml), assign and take: a module drafted
from what runs is adopted in place, the same containers, not restarted.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if out == "" && !preview {
				return errors.New("module draft: give --out DIR to write the manifests, or --preview to list them")
			}
			ctx, cancel := g.ctx()
			defer cancel()
			node, names := args[0], args[1:]
			// Which machine this is, asked of its own agent, whatever --credential says.
			var self api.MembersView
			if err := api.NewClient(g.socket).Get(ctx, "/v1/members", &self); err != nil {
				return err
			}
			if self.Node != node {
				return fmt.Errorf("module draft reads the machine it runs on, which is node %s, not %s: run it on %s", self.Node, node, node)
			}
			in := draft.Input{Node: node}
			var mods []api.ModuleView
			if err := g.client().Get(ctx, "/v1/modules", &mods); err != nil {
				return err
			}
			in.Declared = map[string]string{}
			for _, m := range mods {
				in.Catalogue = append(in.Catalogue, m.Name)
				for _, c := range m.Containers {
					in.Declared[c.Name] = m.Name
				}
			}
			if !noContainers {
				cr := reportedContainers(ctx, g, node)
				if dockerHost == "" {
					dockerHost = cr.Engine
				}
				cs, left, err := foundContainers(ctx, dockerHost, node, names, cr)
				if err != nil {
					return err
				}
				in.Containers, in.LeftOut = cs, left
				// Who outside reaches each published port, as the machine's found firewall says.
				fw, err := reach.Read(ctx, netfilter.Env{})
				if err != nil {
					return fmt.Errorf("module draft: read the found firewall on node %s (drafting reads it as root): %w", node, err)
				}
				in.Firewall = fw
			} else if len(names) > 0 {
				return errors.New("module draft: --no-containers drafts files only: name no container")
			}
			for _, f := range files {
				df, err := readDraftFile(f)
				if err != nil {
					return err
				}
				in.Files = append(in.Files, df)
			}
			res := draft.Draft(in)
			write := !preview && len(res.Refused) == 0
			if write {
				if err := writeDrafts(out, res.Modules); err != nil {
					return err
				}
			}
			if err := g.emit(res, func(w io.Writer) {
				fmt.Fprint(w, draft.Text(res, out))
				if write {
					fmt.Fprintf(w, "written: %d manifest(s) in %s; next: meshd module add [--privileged] FILE, assign, take\n", len(res.Modules), out)
				}
			}); err != nil {
				return err
			}
			if len(res.Refused) > 0 {
				return fmt.Errorf("module draft: refused, nothing written: %d thing(s) found cannot be reproduced by a manifest (listed above)", len(res.Refused))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the directory the manifests are written to (made 0700 if missing)")
	cmd.Flags().StringArrayVar(&files, "file", nil, "[MODULE=]PATH: a file of the machine's the module holds (repeat it)")
	cmd.Flags().BoolVar(&preview, "preview", false, "write nothing: list what each module would hold")
	cmd.Flags().BoolVar(&noContainers, "no-containers", false, "draft only the files named with --file (the engine is not asked)")
	cmd.Flags().StringVar(&dockerHost, "docker-host", "", "the Docker engine's address (default: the one the node's latest report names, else unix:///var/run/docker.sock)")
	return cmd
}

// reportedContainers is the container part of the node's latest report: the engine its
// containers run on, and those a module declares already (held, adopted, replaced, or kept
// aside by a take). Empty when there is no report yet.
func reportedContainers(ctx context.Context, g *globals, node string) report.ContainerReport {
	var v api.NodeView
	if err := g.client().Get(ctx, "/v1/nodes/"+url.PathEscape(node), &v); err != nil || v.Report == nil {
		return report.ContainerReport{}
	}
	cr, _ := report.Detail[report.ContainerReport](v.Report, fsm.KindContainer)
	return cr
}

// foundContainers observes the engine's containers (those named, else all). Left out, each with
// why: meshd's own, those a module declares already (the report's), and those a take keeps
// aside. A name the engine does not have, or one left out, is an error naming it.
func foundContainers(ctx context.Context, host, node string, names []string, cr report.ContainerReport) ([]draft.Container, []string, error) {
	e, err := container.New(host)
	if err != nil {
		return nil, nil, err
	}
	defer e.Close()
	why := func(o container.Observed) string { return leftOut(o, node, cr) }
	var obs []container.Observed
	if len(names) == 0 {
		if obs, err = e.InspectAll(ctx); err != nil {
			return nil, nil, err
		}
	}
	for _, n := range names {
		o, found, err := e.Inspect(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		if !found {
			return nil, nil, fmt.Errorf("module draft: node %s has no container %s (engine %s)", node, n, e.Host())
		}
		if w := why(o); w != "" {
			return nil, nil, fmt.Errorf("module draft: on node %s, %s: it is not drafted again", node, w)
		}
		obs = append(obs, o)
	}
	var out []draft.Container
	var left []string
	for _, o := range obs {
		if w := why(o); w != "" {
			left = append(left, w)
			continue
		}
		out = append(out, draft.Container{Spec: o.Spec, ImageID: o.ImageID, RefImageID: o.RefImageID, Labels: o.Labels})
	}
	return out, left, nil
}

// leftOut is why the draft leaves o out, "" when it drafts it: meshd's own, one a take replaced
// and keeps aside (cr, node's report, names it; its name says so too), or one a module declares
// already.
func leftOut(o container.Observed, node string, cr report.ContainerReport) string {
	if o.Managed {
		return fmt.Sprintf("container %s is meshd's (module %s)", o.Name, o.Module)
	}
	for _, c := range cr.Containers {
		if c.Aside == o.Name {
			return fmt.Sprintf("container %s is the found %s that module %s's take replaced, kept aside stopped "+
				"(meshd node original %s container %s)", o.Name, c.Name, c.Module, node, c.Name)
		}
	}
	if strings.Contains(o.Name, ".meshd-replaced-") {
		return fmt.Sprintf("container %s is one a take replaced, kept aside", o.Name)
	}
	for _, c := range cr.Containers {
		if c.Name == o.Name {
			return fmt.Sprintf("container %s is declared by module %s already", o.Name, c.Module)
		}
	}
	return ""
}

// readDraftFile reads "[MODULE=]PATH" as the machine has it: content, mode and owner.
func readDraftFile(arg string) (draft.File, error) {
	module, path, ok := strings.Cut(arg, "=")
	if !ok {
		module, path = "", arg
	}
	if !filepath.IsAbs(path) {
		return draft.File{}, fmt.Errorf("module draft: --file %s: the path must be absolute", arg)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return draft.File{}, fmt.Errorf("module draft: --file %s: %w", arg, err)
	}
	if !fi.Mode().IsRegular() {
		return draft.File{}, fmt.Errorf("module draft: --file %s: not a regular file (%s)", arg, fi.Mode().Type())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return draft.File{}, fmt.Errorf("module draft: --file %s: %w", arg, err)
	}
	f := draft.File{Module: module, Path: filepath.Clean(path), Content: b, Mode: uint32(fi.Mode().Perm())}
	if fi.Mode()&os.ModeSetuid != 0 {
		f.Mode |= 0o4000
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		f.Mode |= 0o2000
	}
	if fi.Mode()&os.ModeSticky != 0 {
		f.Mode |= 0o1000
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.UID, f.GID = st.Uid, st.Gid
	}
	return f, nil
}

// writeDrafts writes each module's manifest to dir/NAME.yaml, 0600, refusing before it writes
// anything when one of the files is there already.
func writeDrafts(dir string, mods []draft.Module) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("module draft: %w", err)
	}
	var there []string
	for _, m := range mods {
		if _, err := os.Lstat(filepath.Join(dir, m.File)); err == nil {
			there = append(there, filepath.Join(dir, m.File))
		}
	}
	if len(there) > 0 {
		slices.Sort(there)
		return fmt.Errorf("module draft: nothing written: %s exist(s) already; move them or draft into another --out", strings.Join(there, ", "))
	}
	for _, m := range mods {
		p := filepath.Join(dir, m.File)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("module draft: %w", err)
		}
		_, werr := f.Write(m.Manifest)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("module draft: write %s: %w", p, werr)
		}
	}
	return nil
}
