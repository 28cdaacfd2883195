package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// docsManCmd is `meshd docs man --out DIR`: one roff page per command of the tree, section 1, as
// the Debian package installs them (gzipped) under /usr/share/man/man1.
func docsManCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "man --out DIR",
		Short: "Write a man page (section 1) for meshd and each of its commands into DIR",
		Long: `Writes meshd.1 and one page per command (meshd-genesis.1, meshd-node-show.1, ...) into DIR,
generated from the command tree as ` + "`meshd COMMAND --help`" + ` shows it. The page's date is
SOURCE_DATE_EPOCH when set (so a package build is reproducible), else today. The Debian package
ships them; ` + "`man meshd-genesis`" + ` reads one.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return fmt.Errorf("docs man: --out DIR is required")
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("docs man: %w", err)
			}
			if err := manPages(out); err != nil {
				return fmt.Errorf("docs man: %w", err)
			}
			fmt.Fprintf(os.Stderr, "wrote the man pages into %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the directory to write the pages into")
	return cmd
}

// manPages writes the tree's pages into dir. Like docs cli, the tree is built with MESHD_SOCKET
// unset, so the defaults shown are meshd's.
func manPages(dir string) error {
	if v, ok := os.LookupEnv("MESHD_SOCKET"); ok {
		os.Unsetenv("MESHD_SOCKET")
		defer os.Setenv("MESHD_SOCKET", v)
	}
	root := newRoot(&globals{})
	root.DisableAutoGenTag = true
	date := time.Now().UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		date = time.Unix(n, 0).UTC()
	}
	v := buildVersion()
	source := "meshd"
	if s := v.versionString(); s != "" {
		source = "meshd " + s
	}
	return doc.GenManTree(root, &doc.GenManHeader{Title: "MESHD", Section: "1", Date: &date,
		Source: source, Manual: "meshd manual"}, dir)
}
