//! Where a restore into a data directory writes, so that it is all or nothing (docs/operations.md,
//! "Restore"): into a new directory beside the target, renamed into place once the restore is
//! whole and synced; where the target cannot be renamed over (it is a mount point), into the
//! target itself, every entry the restore created removed if it fails. A symlinked target (the
//! package's `DynamicUser` state directory is one) is resolved first, so the link stays a link.

use std::path::{Path, PathBuf};

/// A restore's directory, from [`Place::prepare`] to [`Place::commit`] or [`Place::abandon`].
#[derive(Debug)]
pub struct Place {
    /// The directory the restore is for, resolved.
    target: PathBuf,
    /// Where the store is written: a new directory beside `target`, or `target` itself.
    dir: PathBuf,
    staged: bool,
}

impl Place {
    /// Resolves `path` and checks that it is missing or an empty directory; makes the
    /// directory the restore writes.
    pub fn prepare(path: &Path) -> Result<Place, String> {
        let target = resolve(path)?;
        let exists = match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => true,
            Ok(_) => return Err(format!("{} is not a directory", target.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(format!("cannot read {}: {e}", target.display())),
        };
        if exists
            && std::fs::read_dir(&target)
                .map_err(|e| format!("cannot read {}: {e}", target.display()))?
                .next()
                .is_some()
        {
            return Err(format!(
                "{} is not empty; restore into an empty or missing directory",
                target.display()
            ));
        }
        let (parent, name) = match (target.parent(), target.file_name()) {
            (Some(p), Some(n)) if !p.as_os_str().is_empty() => (p.to_path_buf(), n),
            (None | Some(_), Some(n)) if target.is_relative() => (PathBuf::from("."), n),
            _ => {
                return Err(format!(
                    "{} has no parent directory to restore beside",
                    target.display()
                ))
            }
        };
        std::fs::create_dir_all(&parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        if exists && mount_point(&target, &parent) {
            return Ok(Place {
                dir: target.clone(),
                target,
                staged: false,
            });
        }
        let dir = parent.join(format!(
            ".{}.restoring-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if exists {
            // The restored directory takes the target's owner, as far as this user may.
            use std::os::unix::fs::MetadataExt;
            if let Ok(m) = std::fs::metadata(&target) {
                let _ = rustix::fs::chown(
                    dir.as_path(),
                    Some(rustix::fs::Uid::from_raw(m.uid())),
                    Some(rustix::fs::Gid::from_raw(m.gid())),
                );
            }
        }
        Ok(Place {
            target,
            dir,
            staged: true,
        })
    }

    /// Where the restore writes the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The restore is whole and synced: its directory takes the target's place (over an empty
    /// target directory, which a rename replaces).
    pub fn commit(self) -> Result<(), String> {
        if !self.staged {
            return Ok(());
        }
        if let Err(e) = std::fs::rename(&self.dir, &self.target) {
            let _ = std::fs::remove_dir_all(&self.dir);
            return Err(format!(
                "cannot move the restored store into {}: {e} (nothing was changed there)",
                self.target.display()
            ));
        }
        if let Some(parent) = self.target.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
        }
        Ok(())
    }

    /// The restore failed: everything it wrote goes, and the target is as it was found.
    pub fn abandon(self) -> Result<(), String> {
        if self.staged {
            return std::fs::remove_dir_all(&self.dir)
                .map_err(|e| format!("cannot remove {}: {e}", self.dir.display()));
        }
        // In place: the target was empty, so every entry in it is the restore's.
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot read {}: {e}", self.dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", self.dir.display()))?;
            let path = entry.path();
            let removed = match entry.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
            removed.map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// `path` with a symlink at its end followed (to the directory it names, which may not exist
/// yet), so that the link itself is never replaced.
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut path = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&path)
                    .map_err(|e| format!("cannot read the link {}: {e}", path.display()))?;
                path = match path.parent() {
                    Some(parent) if to.is_relative() => parent.join(to),
                    _ => to,
                };
            }
            _ => return Ok(path),
        }
    }
    Err(format!("{} is a loop of links", path.display()))
}

/// Whether `dir` is a mount point (another file system than its parent's): it cannot be
/// renamed over.
fn mount_point(dir: &Path, parent: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(dir), std::fs::metadata(parent)) {
        (Ok(d), Ok(p)) => d.dev() != p.dev() || d.ino() == p.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_restore_leaves_a_missing_or_empty_target_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        let place = Place::prepare(&missing).unwrap();
        std::fs::write(place.dir().join("db"), b"x").unwrap();
        place.abandon().unwrap();
        assert!(!missing.exists());
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "nothing beside"
        );

        // A symlinked empty target: written beside where it points, the link kept.
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink("real", &link).unwrap();
        let place = Place::prepare(&link).unwrap();
        assert!(place.dir().starts_with(tmp.path()));
        std::fs::write(place.dir().join("db"), b"x").unwrap();
        place.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(link.join("db")).unwrap(), b"x");

        // A target that holds anything is refused.
        assert!(Place::prepare(&real).unwrap_err().contains("is not empty"));
    }
}
