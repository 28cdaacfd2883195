package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"meshd/fsm"
)

func snapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save the record to a file, or restore it from one",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Save the record, as committed, to FILE (0600: it holds token hashes)",
		Args:  exactArgs("FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var buf bytes.Buffer
			if err := g.client().Get(ctx, "/v1/snapshot", &buf); err != nil {
				return err
			}
			rec, index, err := fsm.DecodeSnapshot(bytes.NewReader(buf.Bytes()))
			if err != nil {
				return fmt.Errorf("the agent sent a snapshot that does not read back: %w", err)
			}
			if err := os.WriteFile(args[0], buf.Bytes(), 0o600); err != nil {
				return err
			}
			out := map[string]any{"file": args[0], "index": index, "nodes": len(rec.Nodes), "modules": len(rec.Catalogue)}
			return g.emit(out, func(w io.Writer) {
				fmt.Fprintf(w, "saved the record at index %d (%d nodes, %d modules) to %s\n", index, len(rec.Nodes), len(rec.Catalogue), args[0])
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the record with the one saved in FILE, on every server",
		Long: `Restore replaces the whole record (nodes, catalogue, tunnel, tokens) with a saved one, through
Raft, so every server takes it. Whatever was committed after the snapshot was saved is gone.`,
		Args: exactArgs("FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if _, _, err := fsm.DecodeSnapshot(bytes.NewReader(data)); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var out map[string]any
			if err := g.client().Post(ctx, "/v1/snapshot", bytes.NewReader(data), &out); err != nil {
				return err
			}
			return g.emit(out, func(w io.Writer) { fmt.Fprintf(w, "restored the record from %s\n", args[0]) })
		},
	})
	return cmd
}
