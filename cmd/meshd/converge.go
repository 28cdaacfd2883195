package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"meshd/host"
)

// exitStatus ends the command with code and no message: what it had to say is printed. The
// converge preview exits 2 when something will close (terraform's -detailed-exitcode).
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCodeOf is the process's exit code for err: its exitStatus's, else 1.
func exitCodeOf(err error) (int, bool) {
	var es exitStatus
	if errors.As(err, &es) {
		return es.code, true
	}
	return 1, false
}

// convergeCmd is `meshd converge NODE --preview`: what converging the node will do to what is
// reachable on it, changing nothing. The flip itself (converge without --preview) is not built
// yet and is refused, saying so.
func convergeCmd(g *globals) *cobra.Command {
	var preview bool
	cmd := &cobra.Command{
		Use:   "converge NODE --preview",
		Short: "Preview converging a node: what is reachable on it now, declared or closing (the flip is not built yet)",
		Long: `Converging a node is the last step of its migration: every assigned module taken, meshd's derived
filter loaded, the found firewall retired. Only its preview is built yet; converge without --preview
is refused.

--preview works from what is reachable on the node now (its latest host report), not from the found
firewall's allow list: every socket listening on a non-loopback address (address, port, protocol,
process and pid) and every container port published on one (meshd's containers or not), each marked
"declared by MODULE" (an opening of an assigned module on that port and protocol; the mesh's own
ports are declared by mesh) or "will close". It also lists the modules the flip will take and the
found firewall it will retire and how (ufw: ` + "`ufw disable`" + `; nftables: its tables moved aside), and
ends with a plan token, a digest of what it saw and decided (pids and the time left out).

Exit codes: 0 when nothing will close, 2 when something will, 1 on error.`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if !preview {
				return fmt.Errorf("converge without --preview is not available yet: only the preview is built (issue 13's flip is not); run `meshd converge %s --preview`", args[0])
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var pv host.ConvergePreview
			if err := g.client().Get(ctx, fmt.Sprintf("/v1/nodes/%s/converge-preview", url.PathEscape(args[0])), &pv); err != nil {
				return err
			}
			if err := g.emit(pv, func(w io.Writer) { writeConvergePreview(w, pv) }); err != nil {
				return err
			}
			if pv.WillClose > 0 {
				return exitStatus{code: 2}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&preview, "preview", false, "list what converging the node will close and retire; change nothing (required: the flip is not built yet)")
	return cmd
}

func writeConvergePreview(w io.Writer, pv host.ConvergePreview) {
	fmt.Fprintf(w, "converging %s (%s) will (from its report of %s):\n", pv.Node, pv.Mode, pv.ReportAt.Format("2006-01-02T15:04:05Z07:00"))
	for _, l := range pv.Listeners {
		proc := "-"
		if l.Process != "" {
			proc = fmt.Sprintf("%s (pid %d)", l.Process, l.PID)
		}
		fmt.Fprintf(w, "listening\t%s %s\t%s\t%s\n", l.Proto, hostPort(l.Addr.String(), l.Port), proc, l.Verdict)
	}
	for _, p := range pv.Published {
		fmt.Fprintf(w, "published\t%s %s\tcontainer %s\t%s\n", p.Proto, hostPort(p.HostIP, p.HostPort), p.Container, p.Verdict)
	}
	if len(pv.Listeners)+len(pv.Published) == 0 {
		fmt.Fprintln(w, "nothing listens or is published on a non-loopback address")
	}
	fmt.Fprintf(w, "take\t%s\t\t\n", list(pv.Take))
	fw := pv.Firewall.Kind
	if pv.Firewall.Description != "" {
		fw = pv.Firewall.Description
	}
	fmt.Fprintf(w, "retire\t%s\t%s\t\n", fw, pv.Firewall.Retire)
	if pv.FilterError != "" {
		fmt.Fprintf(w, "filter\t%s\t\t\n", pv.FilterError)
	} else {
		fmt.Fprintln(w, "the derived filter meshd will load (drop by default, IPv4 and IPv6):")
		for _, l := range strings.Split(strings.TrimRight(pv.Filter, "\n"), "\n") {
			fmt.Fprintln(w, "    "+strings.ReplaceAll(l, "\t", "    "))
		}
	}
	if pv.WillClose > 0 {
		fmt.Fprintf(w, "%d will close\t\t\t\n", pv.WillClose)
	} else {
		fmt.Fprintln(w, "nothing will close\t\t\t")
	}
	fmt.Fprintf(w, "plan token\t%s\t\t\n", pv.Token)
}

// hostPort is "addr:port", an IPv6 address in brackets; an empty address is the unspecified one.
func hostPort(addr string, port uint16) string {
	if addr == "" {
		addr = "0.0.0.0"
	}
	return net.JoinHostPort(addr, fmt.Sprint(port))
}
