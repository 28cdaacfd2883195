// Command meshbench runs meshd's side-by-side benchmarks and says what they mean: each figure is
// the median of several runs, each ratio is meshd against the way an operator would do the
// same work (`ufw allow` per port, `nft add rule` per rule, `iptables -A` per rule, one
// `nft -f`), measured in the same run on the same machine, so a noisy machine still gives a
// figure that means something. It prints one table and writes bench/results.json; `make
// bench` runs it. docs/performance.md explains each figure and how to run one alone.
//
//	meshbench [--count 5] [--sizes 10,100,1000] [--out bench/results.json] [--long] [--json]
//
// --long also runs `ufw allow` per port at 1000 (about ten minutes); --json prints the results
// instead of the table.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	count := flag.Int("count", 5, "runs of each benchmark; each figure is their median")
	sizes := flag.String("sizes", "10,100,1000", "numbers of openings to measure at")
	out := flag.String("out", "bench/results.json", "where to write the results (empty: nowhere)")
	long := flag.Bool("long", false, "also run `ufw allow` per port at 1000 (about ten minutes)")
	asJSON := flag.Bool("json", false, "print the results as JSON instead of the table")
	only := flag.String("only", "", "run only these benchmarks (a regexp of names without the Benchmark prefix, e.g. 'AgentFootprint|MeasuredNode')")
	merge := flag.Bool("merge", false, "with --only: put the figures measured into the --out file's earlier results instead of replacing it")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: meshbench [--count N] [--sizes 10,100,1000] [--out bench/results.json] [--long] [--json] [--only REGEXP [--merge]]")
		fmt.Fprintln(os.Stderr, "Runs meshd's benchmarks side by side with the operator's way and prints the figures (docs/performance.md).")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *count < 1 {
		fmt.Fprintln(os.Stderr, "meshbench: --count must be at least 1")
		os.Exit(2)
	}
	if *merge && (*only == "" || *out == "") {
		fmt.Fprintln(os.Stderr, "meshbench: --merge needs --only and --out")
		os.Exit(2)
	}
	res, err := Run(Options{Count: *count, Sizes: *sizes, Long: *long, Log: os.Stderr, Only: *only})
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshbench:", err)
		os.Exit(1)
	}
	if *merge {
		earlier, err := ReadResults(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "meshbench:", err)
			os.Exit(1)
		}
		earlier.Merge(res, *only)
		res = earlier
	}
	if *out != "" {
		if err := res.Write(*out); err != nil {
			fmt.Fprintln(os.Stderr, "meshbench:", err)
			os.Exit(1)
		}
	}
	if *asJSON {
		os.Stdout.Write(res.JSON())
		return
	}
	res.Table(os.Stdout)
	if *out != "" {
		fmt.Printf("\nwritten to %s\n", *out)
	}
}
