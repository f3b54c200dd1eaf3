#!/usr/bin/env bash
# The API's integration tests again, with every herald they start running in cluster mode on a
# real PostgreSQL (HERALD_TEST_BACKEND=postgres: tests/common/mod.rs). The test process starts
# one server from Debian's `postgresql` package and gives each herald a database of its own.
# Left out: the tests of the embedded store's own files (faults, powerloss, upgrade), those that
# run no herald, and tests/cluster*.rs, which are cluster tests on either setting. Tests that
# read or damage sled's files pin themselves to sled (common::ON_SLED).
set -euo pipefail
cd "$(dirname "$0")/../.."
files=(contract ingest delivery conditions debounce controls log logs roles secrets ssrf health
  operator ordering retention metrics receive pages durability crash hardening)
args=()
for f in "${files[@]}"; do args+=(--test "$f"); done
HERALD_TEST_BACKEND=postgres exec cargo test "${args[@]}"
