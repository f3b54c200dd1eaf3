//! The `herald` command line: its subcommands and their flags, in the library so that the man
//! pages and shell completions (`packaging/`) are generated from the same definitions the binary
//! parses.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "herald",
    version = crate::VERSION,
    long_version = crate::LONG_VERSION,
    about = "Self-hosted webhook delivery appliance"
)]
/// `herald`: the whole command line.
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// herald's subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Run the appliance (built-in defaults when no config is given).
    Serve {
        /// The TOML config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Allow http:// and loopback targets and skip endpoint verification (local trials only).
        #[arg(long)]
        dev: bool,
    },
    /// Validate a config file and print every problem with its key path.
    CheckConfig { path: PathBuf },
    /// Print the OpenAPI 3.1 document of the API and of the catalog's webhooks.
    Openapi {
        /// The TOML config file (its catalog fills the webhooks; built-in defaults without).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Apply the cluster database's schema (storage.backend = "postgres") and exit.
    Migrate {
        /// The TOML config file naming the database.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Copy a stopped single-node store into an empty cluster database.
    Copy {
        /// The store: sled:PATH (the data directory).
        #[arg(long)]
        from: String,
        /// The database: postgres:URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE).
        #[arg(long)]
        to: String,
        /// PEM certificates of the CA that signed the database's certificate.
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
    /// Write an online backup of the running herald's store (GET /v1/backup) to a file.
    Backup {
        /// The TOML config file: herald's address (server.listen) and its admin token.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The archive to write (mode 0600, renamed into place when complete); `-` for stdout.
        #[arg(long)]
        out: PathBuf,
    },
    /// Restore a backup archive into an empty store, or check an archive with --check.
    Restore {
        /// Only verify the archive (format, every checksum, counts); needs no store.
        #[arg(long)]
        check: bool,
        /// The TOML config file whose storage receives the archive.
        #[arg(long, conflicts_with = "to")]
        config: Option<PathBuf>,
        /// The store instead of the config's: sled:PATH or postgres:URL.
        #[arg(long)]
        to: Option<String>,
        /// PEM certificates of the CA that signed the database's certificate (with --to postgres:URL).
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// The archive.
        file: PathBuf,
    },
    /// A receiver for trying herald out: verifies signatures and prints what arrives.
    Receive {
        /// Address to listen on, such as 127.0.0.1:9000.
        #[arg(long)]
        listen: String,
        /// The endpoint's signing secret (whsec_...).
        #[arg(long)]
        secret: String,
    },
}
