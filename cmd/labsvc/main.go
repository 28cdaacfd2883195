// Command labsvc is the small service the lab's images are built from.
//
// Nothing can be pulled on the machines meshd is tested on, so every container in the lab and in
// the container driver's tests runs this one static binary, imported as an image with
// `docker import`. It serves HTTP on every address given with --listen and answers each request
// with its greeting and the name it was given, so a test can tell which container answered.
//
//	labsvc serve --listen :8080 [--listen :9090] [--name webapp] [--bind-interface wg0]
//	labsvc probe --target http://10.44.0.1:8080/ [--out FILE] [--target ... --out ...] [--every 250ms] [--timeout 1s]
//
// probe is the lab's instrument: it calls a target continuously and records every success and
// failure with a timestamp (see probe.go).
//
// With --bind-interface NAME, serve answers only what arrives on the interface of that name, as
// a service configured by interface name does (see bound.go); it keeps following the name when
// the link is deleted and raised again.
//
// GREETING in the environment sets the greeting (default "hello").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "probe" {
		if err := probe(os.Args[2:]); err != nil {
			log.Fatalf("labsvc: %v", err)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: labsvc serve --listen ADDR [--listen ADDR ...] [--name NAME]")
		fmt.Fprintln(os.Stderr, "       labsvc probe --target URL [--every DUR] [--timeout DUR] [--out FILE]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var listens listFlag
	fs.Var(&listens, "listen", "address to serve HTTP on (repeatable)")
	name := fs.String("name", "", "name to answer with (default: the hostname)")
	bindIface := fs.String("bind-interface", "", "serve only what arrives on the interface of this name (followed when the link is raised again)")
	_ = fs.Parse(os.Args[2:])
	if len(listens) == 0 {
		listens = listFlag{":8080"}
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	greeting := os.Getenv("GREETING")
	if greeting == "" {
		greeting = "hello"
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s from %s\n", greeting, *name)
	})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *bindIface != "" {
		errc := make(chan error, len(listens))
		for _, addr := range listens {
			go func() { errc <- serveBound(ctx, addr, *bindIface, handler) }()
		}
		for range listens {
			if err := <-errc; err != nil {
				log.Fatalf("labsvc: %v", err)
			}
		}
		return
	}
	errc := make(chan error, len(listens))
	var servers []*http.Server
	for _, addr := range listens {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatalf("labsvc: listen on %s: %v", addr, err)
		}
		srv := &http.Server{Handler: handler}
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
		log.Printf("labsvc: %s serving on %s", *name, ln.Addr())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("labsvc: %v", err)
		}
	}
	for _, s := range servers {
		_ = s.Close()
	}
}
