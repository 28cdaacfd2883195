package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func monitorCmd(g *globals) *cobra.Command {
	var level string
	cmd := &cobra.Command{
		Use:   "monitor [NODE] [--log-level info]",
		Short: "Stream a node's log lines as its agent writes them (this node's without NODE)",
		Long: `Monitor streams a node's log lines as they happen, until Ctrl-C: this node's agent's without NODE;
NODE's from a server, which asks NODE's bus for them (a client streams only its own). --log-level
(debug, info, warn, error) is the lowest level shown, independently of the level the agent logs at:
--log-level debug shows debug lines that its own log leaves out. Nothing is kept: the lines start
when the monitor does. A monitor that reads too slowly is told how many lines it lost.

With --json it prints one JSON object a line, a stream: "line" (as the agent wrote it) and,
parsed from it, "time", "level", "msg" and the other keys in "attrs". The stream's own notices (it
began, lines were lost) go to stderr.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			q := url.Values{"level": {level}}
			if len(args) == 1 {
				q.Set("node", args[0])
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var out io.Writer = g.out
			if g.json {
				out = &logJSON{out: g.out, notes: os.Stderr}
			}
			err := g.client().Do(ctx, http.MethodGet, "/v1/monitor?"+q.Encode(), nil, out)
			if ctx.Err() != nil {
				return nil // the operator ended it
			}
			return err
		},
	}
	cmd.Flags().StringVar(&level, "log-level", "info", "the lowest level shown: debug, info, warn or error")
	return cmd
}
