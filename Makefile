# orderlog — the two commands are `make run` and `make test`.
GO        ?= go
BIN       := bin/orderlog
DATA      ?= ./data
GOBIN     := $(shell $(GO) env GOPATH)/bin
TEST_TIMEOUT ?= 15m
export PATH := $(GOBIN):$(PATH)

.PHONY: run cluster build test test-race fuzz-short bench bench-wal bench-ledger bench-sequencer bench-e2e bench-cluster bench-longrun bench-tiering bench-read bench-tls bench-secure bench-schemas \
        proto proto-tools s3-server-tool duckdb-tool chromium-tool soak chaos chaos-short vet cross fmt clean

## run: build and start `orderlog dev` (everything in one process, data in ./data)
run: build
	$(BIN) dev --data $(DATA)

## cluster: build and start a 3-node cluster on this machine (`orderlog cluster`,
## every node with an embedded etcd member, data in ./data-cluster)
CLUSTER_NODES ?= 3
CLUSTER_DATA  ?= ./data-cluster
cluster: build
	$(BIN) cluster --nodes $(CLUSTER_NODES) --data $(CLUSTER_DATA)

build:
	$(GO) build -o $(BIN) ./cmd/orderlog

## test: every test, the race detector on the concurrent packages, short fuzz runs,
## and a short chaos run (5 faults on a 3-node cluster of real processes)
# The web console's browser test saves its screenshots (FAIL-<step>.png on a failure) here.
ORDERLOG_CONSOLE_ARTIFACTS ?= $(CURDIR)/artifacts/console
test: vet cross s3-server-tool duckdb-tool promtool-tool chromium-tool
	ORDERLOG_CONSOLE_ARTIFACTS=$(ORDERLOG_CONSOLE_ARTIFACTS) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) test-race
	$(MAKE) fuzz-short
	$(MAKE) chaos-short

# Packages whose concurrency is worth the race detector's 5-10x slowdown.
RACE_PKGS ?= $(shell $(GO) list ./ingest/... ./sequencer/... ./reader/... ./internal/node/... ./client/... 2>/dev/null)
test-race:
	@if [ -n "$(RACE_PKGS)" ]; then $(GO) test -race -count=1 -short -timeout $(TEST_TIMEOUT) $(RACE_PKGS); fi

# Each fuzz target runs briefly; the seed corpus runs in every plain `go test`.
# A count of inputs, not a duration: with a duration, Go 1.26's fuzzing
# coordinator can fail a target with "context deadline exceeded" (and no
# failing input) when the deadline finds a starved worker mid-input
# (golang/go#75804, fixed in Go 1.27). 50,000 inputs take 3-10 s per target here.
FUZZ_TIME ?= 50000x
fuzz-short:
	@scripts/fuzz-all.sh $(FUZZ_TIME)

vet:
	$(GO) vet ./...

# cross: the tree, tests included, builds and vets for other systems (macOS;
# Linux-only system calls live behind build tags in internal/fileutil).
# ~15 s once the cross-compiled dependencies are cached.
CROSS_GOOS ?= darwin
cross:
	@for goos in $(CROSS_GOOS); do \
	  echo "GOOS=$$goos go build ./... && go vet ./..."; \
	  GOOS=$$goos $(GO) build ./... && GOOS=$$goos $(GO) vet ./... || exit 1; \
	done

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

## bench: every benchmark, each printing ratios against a reference from the same run;
## the end-to-end one comes last and ends with e2e_msgs_per_s and e2e_vs_wal_ratio
bench: bench-wal bench-ledger bench-sequencer bench-e2e

# E2E_ARGS='-server-args "--ledger-roll-bytes 64MiB --retention-bytes 512MiB"' measures it
# while ledgers roll and retention deletes them
bench-e2e: build
	$(GO) run ./bench/e2e -orderlog $(BIN) $(E2E_ARGS)

## bench-cluster: 3 `orderlog node` processes (W=3 A=2) against `orderlog dev`, same run;
## ends with cluster_msgs_per_s and cluster_vs_single_ratio
bench-cluster: build
	$(GO) run ./bench/cluster -orderlog $(BIN)

## bench-longrun: costs against the history's length (issue 16): writes 1 KiB messages
## up to each of LONGRUN_SIZES under --retention-bytes 2GiB and 64 MiB ledger rolls, and
## at each size times restart to /readyz, the sequencer's takeover, a producer's takeover
## and a fresh reader's start, and the RSS; ends with longrun_<figure>_ratio= (largest
## size over smallest, goal ≤ 1.5), longrun_disk_ratio= and longrun_result=. The default
## writes 50 GiB, and stops at 4x the retention on disk while the WAL keeps what retention
## deleted (docs/notes/longrun.md); quick (~3 min): make bench-longrun LONGRUN_SIZES=100k,1M,5M
LONGRUN_SIZES ?= 1M,10M,50M
bench-longrun: build
	$(GO) run ./bench/longrun -orderlog $(BIN) -sizes $(LONGRUN_SIZES)

## bench-tiering: the archive (docs/design.md §8): produces TIERING_ROWS rows of 1 KiB to
## `orderlog dev`, restarts it with tiering and times the worker catching up against a
## plain arrow-go Parquet writer on the same rows, reads the range back hot and, once
## retention deleted the ledgers, from the archive, queries an absent key (data page bytes
## read) and compares produce p99 with and without tiering; ends with
## tier_vs_parquet_ratio=, archive_read_vs_hot_ratio=, absent_key_query_data_bytes=,
## produce_p99_tiering_vs_plain_ratio= and tiering_result=; quick (~3 min): TIERING_ROWS=200k;
## TIERING_ARGS='-rounds 1 -ref-rows 2M' shortens a large run
TIERING_ROWS ?= 10M
bench-tiering: build
	$(GO) run ./bench/tiering -orderlog $(BIN) -rows $(TIERING_ROWS) $(TIERING_ARGS)

## bench-read: the read side (issue 18): `orderlog dev` and `orderlog bench --read` as separate
## processes: rounds of a peak produce (16 streams, 1 KiB) each followed by a range read of the
## log from offset 0 through the Go client, then a tailing consumer while producers run at half
## the peak, then `orderlog read --limit 0 > /dev/null` over the log; ends with
## read_vs_produce_ratio= (goal >= 3), tail_p99_ms=, tail_p99_vs_ack_p99_ratio= (goal <= 1.5),
## group_keeps_up= and cli_read_msgs_per_s=; ~3 min; READ_ARGS='-rounds 5 -duration 8s'
bench-read: build
	$(GO) run ./bench/read -orderlog $(BIN) $(READ_ARGS)

## bench-tls: the bench-e2e load against a plaintext `orderlog dev` and a `dev --tls`,
## alternately in the same run; ends with tls_cpu_per_msg_ratio= (server and load generator
## CPU per message at the peak), tls_vs_plain_ratio= (peak msg/s) and
## tls_p99_vs_plain_ratio= (ack p99 at half the plaintext peak); ~3 min;
## TLS_ARGS='-rounds 5 -duration 6s'
bench-tls: build
	$(GO) run ./bench/tls -orderlog $(BIN) $(TLS_ARGS)

## bench-secure: as bench-tls, the second server with TLS, tokens and ACLs, and WAL encryption
## at rest all on; ends with secure_vs_plain_ratio= (goal >= 0.8) and
## secure_cpu_per_msg_ratio=; ~3 min; SECURE_ARGS='-rounds 5 -duration 6s'
bench-secure: build
	$(GO) run ./bench/tls -secure -orderlog $(BIN) $(SECURE_ARGS)

## bench-schemas: the bench-e2e load of 1 KiB JSON payloads into a topic with strict JSON
## Schema validation and into one without, alternately on one `orderlog dev` (issue 21);
## ends with validated_cpu_per_msg_ratio= and validated_vs_plain_ratio= (goal >= 0.8); ~1 min
bench-schemas: build
	$(GO) run ./bench/schemas -orderlog $(BIN) $(SCHEMAS_ARGS)

## bench-scale: one `orderlog sequencer` and N = 1, 2, 4, 8 `orderlog ingest` processes (W=A=1,
## stores and etcd on tmpfs) under the bench load: per N msg/s, grants/s, messages per grant,
## the sequencer's CPU per grant and per message, commit-log bytes/s, etcd writes/s, C lag p99;
## then the sequencer saturated by synthetic grant sessions and `orderlog dev` at its peak;
## ends with sequencer_headroom_ratio= (goal >= 10); ~6 min; SCALE_ARGS='-rounds 1 -duration 3s'
.PHONY: bench-scale
bench-scale: build
	$(GO) run ./bench/scale -orderlog $(BIN) $(SCALE_ARGS)

## bench-console: bench-e2e's peak load against `orderlog dev` with a headless Chromium tab on
## the console's live tail and without it, alternately; ends with console_cpu_per_msg_ratio=
## (the server's CPU per message) and console_vs_plain_ratio= (msg/s; goal: within noise of 1);
## ~1 min; CONSOLE_ARGS='-rounds 5 -duration 6s'
.PHONY: bench-console
bench-console: build chromium-tool
	$(GO) run ./bench/console -orderlog $(BIN) $(CONSOLE_ARGS)

bench-wal:
	@if [ -d bench/wal ]; then $(GO) run ./bench/wal; else echo "bench-wal: not built yet"; fi

bench-ledger:
	@if [ -d bench/ledger ]; then $(GO) run ./bench/ledger; else echo "bench-ledger: not built yet"; fi

bench-sequencer:
	@if [ -d bench/sequencer ]; then $(GO) run ./bench/sequencer; else echo "bench-sequencer: not built yet"; fi

## soak: long crash/chaos runs (a short version of each runs in `make test`)
SOAK_CYCLES ?= 50
soak:
	ORDERLOG_SOAK=$(SOAK_CYCLES) $(GO) test -count=1 -timeout 60m -run 'Soak|Crash|Random|Simulation' -v ./...

## chaos: a 3-node cluster of real `orderlog node` processes under gRPC and HTTP
## producers and tailing readers, CHAOS_CYCLES faults (kill -9, SIGSTOP, partition,
## wiped WAL, flipped WAL byte), then internal/history's checks and porcupine's
## linearizability check; prints write unavailability per fault kind
## (CHAOS_SEED replays a fault schedule, CHAOS_DIR keeps the node directories)
CHAOS_CYCLES ?= 20
chaos: build
	CHAOS_STRICT=1 CHAOS_CYCLES=$(CHAOS_CYCLES) ORDERLOG_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 60m -run '^TestChaos$$' -v ./internal/chaos

# chaos-short: the make test version: 5 mixed faults; the history checks and
# porcupine decide, a long stall after one fault is reported, not failed
chaos-short: build
	CHAOS_CYCLES=5 ORDERLOG_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m -run '^TestChaos$$' -v ./internal/chaos

## proto: regenerate the committed gRPC/protobuf code
proto: proto-tools
	protoc -I proto --go_out=. --go_opt=module=orderlog \
	  --go-grpc_out=. --go-grpc_opt=module=orderlog proto/*.proto

proto-tools:
	@command -v protoc >/dev/null || (apt-get update && apt-get install -y protobuf-compiler)
	@test -x $(GOBIN)/protoc-gen-go || GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	@test -x $(GOBIN)/protoc-gen-go-grpc || GOFLAGS= $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

## s3-server-tool: versitygw, the S3-compatible server the tiering/objstore tests run against
s3-server-tool:
	@test -x $(GOBIN)/versitygw || GOFLAGS= $(GO) install github.com/versity/versitygw/cmd/versitygw@v1.8.0

## promtool-tool: promtool (Debian's prometheus package), which the deploy/ tests check the
## alert rules with (`promtool check rules`, `promtool test rules`)
promtool-tool:
	@command -v promtool >/dev/null || (apt-get update && apt-get install -y --no-install-recommends prometheus)

## chromium-tool: Chromium, the headless browser that the web console's tests drive
## (console/browser_test.go). Any browser the test accepts will do: $ORDERLOG_CHROMIUM, or
## chromium, chromium-browser, google-chrome or headless-shell on PATH. Without one it installs
## Debian's chromium with apt-get (as CI does: root on Debian); if that fails it warns and goes
## on, and TestConsoleBrowser is then skipped, saying why
CHROMIUM_NAMES := chromium chromium-browser google-chrome headless-shell
chromium-tool:
	@if [ -n "$$ORDERLOG_CHROMIUM" ]; then exit 0; fi; \
	for name in $(CHROMIUM_NAMES); do command -v $$name >/dev/null && exit 0; done; \
	(apt-get update && apt-get install -y --no-install-recommends chromium) || \
	  echo "chromium-tool: WARNING: no Chromium ($(CHROMIUM_NAMES) or \$$ORDERLOG_CHROMIUM) and apt-get could not install one: TestConsoleBrowser will be skipped" >&2

## duckdb-tool: DuckDB for node (npm @duckdb/node-api), the independent reader the
## tiering/parquetfile tests check archive files with; reinstalled when the lock file changes
DUCKCHECK := tiering/parquetfile/duckcheck
duckdb-tool: $(DUCKCHECK)/node_modules/.package-lock.json
$(DUCKCHECK)/node_modules/.package-lock.json: $(DUCKCHECK)/package.json $(DUCKCHECK)/package-lock.json
	npm ci --prefix $(DUCKCHECK) --no-audit --no-fund
	@touch $@

clean:
	rm -rf bin
