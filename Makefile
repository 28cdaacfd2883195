# meshd: `make test` is the one test command (CI runs it through .ci/run); `make demo` raises the
# lab and narrates a migration. Both install what they need first (scripts/deps.sh, idempotent).
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
# Long soaks hide behind MESHD_SOAK=1 (none needs it yet); the default suite stays well under 20 minutes.
TEST_TIMEOUT ?= 30m

.PHONY: all build deps test vet bench demo screenshots chaos clean package package-check

all: build

deps:
	@bash scripts/deps.sh

# The commit is stamped by hand too: Go's own VCS stamping misses a build from a git worktree.
build: deps
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.commit=$$(git rev-parse HEAD 2>/dev/null)$$(git diff --quiet HEAD 2>/dev/null || echo -modified) -X main.version=$$($(GO) run ./cmd/meshpkg version)" -o bin/ ./cmd/...

# bin/meshd_VERSION_amd64.deb (packaging/deb, docs/runbook.md "Installing the package"): the
# version is the tag's or the commit's, as `meshd version` says; the binary it ships is built
# static and stripped into bin/deb/meshd, stamped like the build's.
package: deps
	$(GO) run ./cmd/meshpkg build --out bin

# Debian's checks of that package (scripts/package-check.sh): lintian, and piuparts in a bookworm
# chroot from Debian's mirror, install-purge and an upgrade from the first packaged build. As
# root; a few minutes; not part of `make test`.
package-check: deps
	@bash scripts/package-check.sh

vet:
	@bash scripts/deps.sh --staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	"$$($(GO) env GOPATH)/bin/staticcheck" ./...

# Each run writes its own log (two runs at once never share one); its path is printed first and last.
# Beside the suite: the packages whose goroutines share the record, the host's state and gossip
# run again under the race detector, and each fuzz target runs briefly from its seed corpus (a
# crasher it finds is written under the package's testdata/fuzz and fails the run). They run in
# the background while the suite runs (its lab tests wait on machines more than they compute, so
# the second core is mostly free), write their own log, and it is appended to the suite's at the
# end; the exit code is the suite's, else theirs. Their tests pick random names, as every root
# test does, so two runs of one test never meet. Minimizing each new input is capped at 1 s: at
# Go's default (60 s) a 10 s run spends itself minimizing, a dozen execs. Each target's budget is
# a count of executions (seconds each here), not a duration: with a duration Go 1.26's
# coordinator can report its own deadline as the target failing ("context deadline exceeded", no
# input written: golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
RACE_PKGS ?= ./fsm ./gossip ./agent ./host/...
FUZZ_PARSE ?= 100000x
FUZZ_SNAPSHOT ?= 60000x

test: vet
	@bash scripts/deps.sh --bench
	@log=$$(mktemp /tmp/meshd-test.XXXXXX.log); passes=$${log%.log}.passes.log; \
	  echo "test log: $$log (race and fuzz passes: $$passes, appended at the end)"; \
	  ( $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS) && \
	    $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZ_PARSE) -fuzzminimizetime 1s ./catalogue && \
	    $(GO) test -run '^$$' -fuzz '^FuzzDecodeSnapshot$$' -fuzztime $(FUZZ_SNAPSHOT) -fuzzminimizetime 1s ./fsm \
	  ) >"$$passes" 2>&1 & pid=$$!; \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./... 2>&1 | tee "$$log"; code=$${PIPESTATUS[0]}; \
	  wait $$pid; pcode=$$?; \
	  echo "== the race and fuzz passes (exit $$pcode)" | tee -a "$$log"; tee -a "$$log" <"$$passes"; \
	  if [ $$code -eq 0 ]; then code=$$pcode; fi; \
	  echo "test log: $$log"; exit $$code

# The chaos soak (docs/chaos.md): runs with fresh seeds for CHAOS_MINUTES; `make chaos SEED=N`
# replays seed N once instead, its workload for CHAOS_MINUTES if given (else 2 minutes).
# `make test` runs the short fixed seeds only. A failure names its folder (history, faults, each
# agent's log) and its seed. No go test timeout: each run's context ends it (workload + 15 min).
CHAOS_MINUTES ?= 10
# The minutes a seed's replay runs for: only those given (command line or environment), else none.
chaos_minutes_origin = $(filter command line environment,$(origin CHAOS_MINUTES))
CHAOS_SEED_MINUTES = $(if $(chaos_minutes_origin),$(CHAOS_MINUTES))
chaos: deps
	@if [ -n "$(SEED)" ]; then \
	  CHAOS_SEED=$(SEED) CHAOS_MINUTES=$(CHAOS_SEED_MINUTES) \
	    $(GO) test -count=1 -v -timeout 0 -run '^TestChaos$$' ./chaos; \
	else \
	  CHAOS_MINUTES=$(CHAOS_MINUTES) $(GO) test -count=1 -v -timeout 0 -run '^TestChaos$$' ./chaos; \
	fi

# The side-by-side figures (docs/performance.md): one table, and bench/results.json. --bench adds
# etcd (Debian's etcd-server), which the Raft figure runs beside meshd on loopback.
bench:
	@bash scripts/deps.sh --bench
	$(GO) run ./cmd/meshbench --out bench/results.json

demo: build package
	@bash scripts/demo.sh

# The status page's screenshots in docs/img, taken by cmd/statusshot from the demo's lab (its hub,
# with every machine's engine up) at two moments of the migration.
screenshots: build package
	@SCREENSHOTS=docs/img bash scripts/demo.sh

clean:
	rm -rf bin
