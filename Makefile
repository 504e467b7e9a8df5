# mend: a thin driver over CMake, as neovim's Makefile is. Everything real is in CMakeLists.txt.
#
#   make demo    install what is missing, build, run the order saga against ./mend.db
#   make test    install what is missing, build, run ctest (C unit tests and busted specs)
#   make crash-soak   thousands of kill -9 cycles of real workers, on SQLite and on PostgreSQL
#                     (CYCLES=3000 on SQLite, PG_CYCLES=1000 on PostgreSQL)
#   make fuzz    the libFuzzer targets of tests/fuzz, FUZZ_SECONDS (60) each, in build-fuzz/
#
# Variables: BUILD_TYPE (RelWithDebInfo), SANITIZE (OFF; ON builds with ASan and UBSan, thread
# with TSan, which runs the C tests only),
# BUILD_DIR (build), JOBS (all processors), TEST_JOBS (2: tests ctest runs side by side).
# Builds made here treat warnings as errors (MEND_WERROR=ON); a plain `cmake` build does not.

BUILD_TYPE ?= RelWithDebInfo
SANITIZE   ?= OFF
BUILD_DIR  ?= build
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# ctest's tests side by side in `make test` (CMakeLists.txt keeps the heavy ones apart)
TEST_JOBS  ?= 2
CMAKE      ?= cmake
MEND       := $(BUILD_DIR)/mend

# Debian 12 packages needed to build and test (sqlite3: the specs read the database with its
# shell, as an operator would; clang and libclang-rt-14-dev: the fuzz targets, libFuzzer; python3 and openssl: the specs' HTTP server and its certificate;
# postgresql and libpq-dev: the PostgreSQL store, and the throw-away server its tests start;
# libh2o-dev and libssl-dev: mend serve (libssl-dev also the SHA-256 of tokens); curl: its specs' client; chromium and chromium-driver:
# its dashboard's browser test; faketime: workers with skewed clocks in the crash harness on
# PostgreSQL). Not
# make itself: it must be there to read this file (README: `apt-get install -y make git` first
# on a minimal Debian).
DEB_PACKAGES := liblua5.4-dev libuv1-dev libsqlite3-dev libjansson-dev libedit-dev \
                lua5.4 lua-busted sqlite3 cmake gcc pkg-config tmux valgrind \
                clang libclang-rt-14-dev libcurl4-openssl-dev python3 openssl \
                postgresql libpq-dev libh2o-dev libssl-dev curl chromium chromium-driver \
                faketime
# The benchmarks' own: nginx, the keep-alive server of the HTTP benchmark (W9; not started as a
# service: the benchmark runs its own on a free loopback port).
BENCH_PACKAGES := nginx-light

.PHONY: all deps build demo test crash-soak clean

all: build

deps:
	@command -v dpkg-query >/dev/null 2>&1 || { \
	  echo "deps: dpkg-query not found; install these (Debian names) by hand: $(DEB_PACKAGES) $(BENCH_PACKAGES)" >&2; \
	  exit 1; }
	@missing=""; \
	for p in $(DEB_PACKAGES) $(BENCH_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" \
	    || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" -eq 0 ]; then \
	  echo "deps: installing$$missing"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	else \
	  echo "deps: missing Debian packages. Install them with:" >&2; \
	  echo "  sudo apt-get install -y$$missing" >&2; \
	  exit 1; \
	fi

build: deps
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DMEND_SANITIZE=$(SANITIZE) \
	  -DMEND_WERROR=ON
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

# The declined card is expected to compensate: exit 3 is its success here.
demo: build
	@echo
	@echo "== an order: reserve stock, charge the card (one transient failure), ship =="
	$(MEND) run workflows/order.lua --db ./mend.db
	@echo
	@echo "== a declined card: the saga compensates in reverse (mend exits 3) =="
	@$(MEND) run workflows/order.lua --db ./mend.db --input '{"card":"declined"}'; \
	  rc=$$?; \
	  if [ $$rc -ne 3 ]; then echo "demo: expected exit 3 (compensated), got $$rc" >&2; exit 1; fi

# ctest starts a throw-away PostgreSQL cluster for the tests that need one and stops it after
# them (tests/pg/cluster.sh); the trap stops it too when ctest itself is interrupted.
test: build
	@state="$$(cd $(BUILD_DIR) && pwd)/pg-cluster"; script="$(CURDIR)/tests/pg/cluster.sh"; \
	  trap 'sh "$$script" stop "$$state"' EXIT INT TERM; \
	  cd $(BUILD_DIR) && ctest --output-on-failure -j $(TEST_JOBS)

# Thousands of kill -9 / restart cycles of real workers: CYCLES on SQLite (busted_crash; make
# test runs 200), PG_CYCLES on PostgreSQL (busted_crash_pg; make test runs 120).
CYCLES ?= 3000
PG_CYCLES ?= 1000
crash-soak: build
	cd $(BUILD_DIR) && MEND_CRASH_CYCLES=$(CYCLES) MEND_PG_CRASH_CYCLES=$(PG_CYCLES) \
	  ctest --output-on-failure -R busted_crash

# Benchmarks of issue 6 (bench/README.md): the full suite (under 10 minutes), and a quick
# subset (under a minute) compared against bench/baseline.json; BENCH_ARGS=--update-baseline
# rewrites it. They build into a directory of their own (BENCH_BUILD_DIR, same BUILD_TYPE), so
# that a rebuild of build/ by someone else cannot swap the module under a running benchmark.
BENCH_BUILD_DIR ?= build-bench
BENCH_ENV := LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;;" \
             LUA_CPATH="$(CURDIR)/$(BENCH_BUILD_DIR)/lib/?.so;;"
.PHONY: bench bench-quick bench-build bench-pg
bench-build:
	$(MAKE) build BUILD_DIR=$(BENCH_BUILD_DIR)

# bench-pg: W1, W3, W5 and four `mend worker` processes on a throw-away PostgreSQL cluster of
# its own (tests/pg/cluster.sh), stopped afterwards; no baseline. `make bench` runs it too.
bench: bench-build
	$(BENCH_ENV) lua5.4 bench/run.lua --suite full $(BENCH_ARGS)
	$(BENCH_ENV) lua5.4 bench/run.lua --suite pg

bench-pg: bench-build
	$(BENCH_ENV) lua5.4 bench/run.lua --suite pg

bench-quick: bench-build
	$(BENCH_ENV) lua5.4 bench/run.lua --suite quick --compare bench/baseline.json $(BENCH_ARGS)

# The fuzz targets (tests/fuzz/README.md), built with clang in a directory of their own and run
# on copies of their seed corpora; `make test` runs each for 30 s.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS   ?= 60
FUZZ_CC        ?= clang
.PHONY: fuzz
fuzz: deps
	CC=$(FUZZ_CC) CMAKE=$(CMAKE) sh tests/fuzz/run.sh $(CURDIR) $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(JOBS); \
	  rc=$$?; if [ $$rc -eq 77 ]; then echo "fuzz: needs clang and libFuzzer" >&2; exit 1; fi; \
	  exit $$rc

clean:
	rm -rf $(BUILD_DIR)
