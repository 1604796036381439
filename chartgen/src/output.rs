//! The set of files a command wants on disk, written atomically or compared (`--check`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Desired file contents, plus directories whose unlisted files count as stale.
#[derive(Default)]
pub struct Plan {
    files: BTreeMap<PathBuf, String>,
    owned_dirs: Vec<PathBuf>,
}

impl Plan {
    pub fn add(&mut self, path: impl Into<PathBuf>, content: String) {
        self.files.insert(path.into(), content);
    }

    /// Every file under `dir` that the plan does not list is stale (removed on apply).
    pub fn own_dir(&mut self, dir: impl Into<PathBuf>) {
        self.owned_dirs.push(dir.into());
    }

    /// Files that differ from the plan: changed, missing, or stale in an owned directory.
    pub fn drift(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (path, want) in &self.files {
            match fs::read_to_string(path) {
                Ok(have) if &have == want => {}
                Ok(_) => out.push(path.clone()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => out.push(path.clone()),
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read '{}'", path.display()));
                }
            }
        }
        out.extend(self.stale()?);
        Ok(out)
    }

    /// Writes every changed file atomically and removes stale ones; returns what changed.
    pub fn apply(&self) -> anyhow::Result<Vec<PathBuf>> {
        let changed = self.drift()?;
        let stale = self.stale()?;
        for path in &changed {
            if let Some(content) = self.files.get(path) {
                write_atomic(path, content)?;
            }
        }
        for path in &stale {
            fs::remove_file(path)
                .with_context(|| format!("cannot remove stale '{}'", path.display()))?;
        }
        Ok(changed)
    }

    fn stale(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for dir in &self.owned_dirs {
            for path in walk(dir)? {
                if !self.files.contains_key(&path) {
                    out.push(path);
                }
            }
        }
        Ok(out)
    }
}

fn walk(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("cannot list '{}'", dir.display())),
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("cannot list '{}'", dir.display()))?
            .path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

/// Writes through a temporary file in the same directory and renames it into place, so a
/// failure never leaves a half-written file behind.
pub fn write_atomic(path: &Path, content: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("cannot create '{}'", dir.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.chartgen-{}.tmp", std::process::id()));
    fs::write(&tmp, content).with_context(|| format!("cannot write '{}'", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot move '{}' into place", path.display()))
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> anyhow::Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read '{}'", path.display()))
}
