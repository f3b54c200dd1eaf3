//! Storage as herald runs it: the contract and its values (the `herald-store` crate, re-exported
//! here), its two implementations (`herald-store-sled` as [`sled`], `herald-store-postgres` as
//! [`postgres`]) and [`Backend`], the one herald runs on, which opens, dispatches to and closes
//! whichever the config names. The engine and the API name only the contract: `clippy.toml`
//! refuses `SledStore` and `PgStore` anywhere else in herald (see `herald-store`'s
//! documentation for the layout and for adding an operation).

mod backend;

#[cfg(feature = "postgres")]
pub use backend::postgres_settings;
pub use backend::{Backend, Hold};
pub use herald_store::*;
#[cfg(feature = "postgres")]
pub use herald_store_postgres as postgres;
pub use herald_store_sled as sled;
