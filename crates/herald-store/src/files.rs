//! The data directory holds endpoint secrets (`whsec_`, `whsk_`) and account secrets in plain
//! text, so it is private: the directory `0700`, every file in it `0600`, whatever the umask
//! of whoever started herald (docs/operations.md).
//!
//! sled creates its own files (`db`, `conf`, `snap.*`, `blobs/`) with the process's umask, so
//! `herald serve` sets the umask to `077` before anything starts ([`private_umask`]); the
//! directory is created and made private here, and what an older herald left with other modes
//! is made private when the store opens ([`make_private`]).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Modes of the data directory (and its subdirectories) and of every file in it.
pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;

/// Makes every file and directory the process creates from now on private to its user
/// (umask `077`). Called once at start, before any thread.
pub fn private_umask() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

/// Creates `path` (and missing parents) and makes `path` itself `0700`.
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Makes `dir` `0700` and everything in it (recursively) `0700` for directories and `0600`
/// for files.
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.permissions().mode() & 0o777 != DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            make_private(&entry.path())?;
        } else if kind.is_file() {
            let mode = entry.metadata()?.permissions().mode() & 0o777;
            if mode != FILE_MODE {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(FILE_MODE))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn directories_and_files_are_made_private() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("a/data");
        create_private_dir(&data).unwrap();
        assert_eq!(mode(&data), DIR_MODE);
        std::fs::create_dir(data.join("blobs")).unwrap();
        std::fs::set_permissions(data.join("blobs"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(data.join("db"), b"x").unwrap();
        std::fs::set_permissions(data.join("db"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(data.join("blobs/1"), b"x").unwrap();
        std::fs::set_permissions(data.join("blobs/1"), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        make_private(&data).unwrap();
        assert_eq!(mode(&data.join("blobs")), DIR_MODE);
        assert_eq!(mode(&data.join("db")), FILE_MODE);
        assert_eq!(mode(&data.join("blobs/1")), FILE_MODE);
    }
}
