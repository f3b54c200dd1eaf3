//! Cluster mode on a real PostgreSQL each test starts itself: migrations and fixtures, the
//! store's shared state, and several herald processes as one cluster.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod cluster_alerts;
mod cluster_nodes;
mod cluster_store;
mod cluster_traces;
mod cluster_versions;
