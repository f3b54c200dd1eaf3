#!/usr/bin/env bash
# The API's integration tests again, with every herald they start running in cluster mode on a
# real PostgreSQL (HERALD_TEST_BACKEND=postgres: tests/common/mod.rs). The test process starts
# one server from Debian's `postgresql` package and gives each herald a database of its own.
# That is the `api` test binary (tests/api/): the embedded store's own files (tests/store/), the
# command's tests (tests/command/) and the cluster's (tests/cluster/, cluster tests on either
# setting) are left out. Tests that read or damage sled's files pin themselves to sled
# (common::ON_SLED).
set -euo pipefail
cd "$(dirname "$0")/../.."
HERALD_TEST_BACKEND=postgres exec cargo test --test api
