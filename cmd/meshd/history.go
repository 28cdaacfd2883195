package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/fsm"
)

// writeBoard is the board's text under status's nodes: a row per node with its track, the next
// step, what is in its way and how long it has been adopted.
func writeBoard(w io.Writer, b api.Board) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "BOARD\tNEXT\tADOPTED FOR\tTRACK")
	for _, r := range b.Rows {
		next, adopted := r.Next, "-"
		if next == "" {
			next = "(done)"
		}
		if r.AdoptedFor > 0 {
			adopted = r.AdoptedFor.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Node, next, adopted, r.Track())
		for _, why := range r.Blocking {
			fmt.Fprintf(w, "  in the way\t%s\n", why)
		}
	}
}

// historyCmd is `meshd history [NODE] [--since DURATION]`, and `meshd history keep`.
func historyCmd(g *globals) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "history [NODE]",
		Short: "Show what happened when and who did it: every command committed and the host events that matter",
		Long: `History prints the record's timeline, oldest first: every command committed (assign, take,
converge, return, settings, enrolment, removal, token and credential, module added) with its record
index, its time, the node and module it is about, and who gave it ("operator NAME" for an operator
credential, "root on NODE's socket" on a server's own socket, "-" for what an agent did of itself);
and the host events that matter, read from the nodes' reports (a held file changed by something
else, a found firewall enabled again by hand, the tunnel's state, a take stepped back), each once
when it starts and, where it says so, once when it ends. A converge names each module it takes
("MODULE taken on NODE, by its converge"), under its own record index.

The history lives in the record, so it survives snapshots and restores. It is bounded: the last
2000 events, none older than 30 days, unless ` + "`meshd history keep`" + ` says otherwise.

NODE shows only the events about that node; --since 1h only those of the last hour.`,
		Example: `  meshd history
  meshd history web1 --since 30m
  meshd history --json | jq '.events[] | select(.by)'     # the commands someone gave`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			q := url.Values{}
			if len(args) == 1 {
				q.Set("node", args[0])
			}
			if since > 0 {
				q.Set("since", since.String())
			}
			var v api.HistoryView
			path := "/v1/history"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			if err := g.client().Get(ctx, path, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) { writeHistory(w, v) })
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only the events of this long before now (30m, 2h)")
	cmd.AddCommand(historyKeepCmd(g))
	return cmd
}

// historyKeepCmd is `meshd history keep --count N --age D`.
func historyKeepCmd(g *globals) *cobra.Command {
	var count int
	var age time.Duration
	cmd := &cobra.Command{
		Use:   "keep",
		Short: "Set how much history the record keeps (a count of events and an age)",
		Long: `Keep bounds the history kept in the record: at most --count events (at least 10), none older
than --age (at least 1h) before the newest command. 0 returns a bound to its default (2000 events,
720h). The change is itself an event.`,
		Example: "  meshd history keep --count 5000 --age 2160h",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.HistoryView
			if err := g.client().Post(ctx, "/v1/history/keep", fsm.HistoryKeepSet{Count: count, Age: age}, &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) { fmt.Fprintf(w, "kept: the last %d events, none older than %s\n", v.Count, v.Age) })
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "keep at most this many events (0: the default, 2000)")
	cmd.Flags().DurationVar(&age, "age", 0, "keep no event older than this (0: the default, 720h)")
	return cmd
}

// writeHistory is history's text: one event a line.
func writeHistory(w io.Writer, v api.HistoryView) {
	fmt.Fprintln(w, "INDEX\tAT\tNODE\tBY\tWHAT")
	for _, e := range v.Events {
		by := e.By
		switch {
		case e.Host:
			by = "(host)"
		case by == "":
			by = "-"
		}
		node := e.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", e.Index, e.At.UTC().Format(time.RFC3339), node, by, strings.TrimSpace(e.What))
	}
	if len(v.Events) == 0 {
		fmt.Fprintln(w, "(no events)")
	}
	fmt.Fprintf(w, "\nkept: the last %d events, none older than %s\n", v.Count, v.Age)
}
