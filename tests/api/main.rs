//! The API's integration tests, one module per concern: each starts the real herald (or one in
//! this process on a manual clock) on a temp data dir and talks to it over HTTP, with real
//! receivers. `tests/tools/on-postgres.sh` runs this binary again with every herald in cluster
//! mode on PostgreSQL.

#[path = "../common/mod.rs"]
mod common;

mod alert_emails;
mod alerts;
mod backup;
mod conditions;
mod contract;
mod controls;
mod crash;
mod debounce;
mod delivery;
mod durability;
mod filters;
mod hardening;
mod health;
mod ingest;
mod log;
mod logs;
mod look;
mod metrics;
mod operator;
mod ordering;
mod pages;
mod purge;
mod receive;
mod retention;
mod roles;
mod secrets;
mod ssrf;
mod svix;
mod traces;
