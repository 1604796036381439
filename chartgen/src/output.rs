//! The set of files a command wants on disk, compared (`--check`) or applied all-or-nothing:
//! every new file is staged beside its target first, then renamed into place; if any step fails,
//! what was already replaced is restored and every temporary is removed.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tempfile::NamedTempFile;

/// Desired file contents.
#[derive(Default)]
pub struct Plan {
    files: BTreeMap<PathBuf, String>,
    /// Files whose content the caller read this run (true: already as planned), so drift does not
    /// read them again.
    known: BTreeMap<PathBuf, bool>,
    /// When set, every path written or removed must lie under it, reached without symlinks.
    root: Option<PathBuf>,
}

impl Plan {
    /// A plan that may only write inside `root` (a chart directory).
    pub fn confined(root: &Path) -> Self {
        Self {
            root: Some(root.to_path_buf()),
            ..Self::default()
        }
    }

    pub fn add(&mut self, path: impl Into<PathBuf>, content: String) {
        let path = path.into();
        self.known.remove(&path);
        self.files.insert(path, content);
    }

    /// Adds `content` for `path`, whose content the caller has already read (`current`, None when
    /// it does not exist): drift compares with that instead of reading the file again.
    pub fn add_read(&mut self, path: impl Into<PathBuf>, content: String, current: Option<&str>) {
        let path = path.into();
        self.known
            .insert(path.clone(), current == Some(content.as_str()));
        self.files.insert(path, content);
    }

    /// Files that differ from the plan: changed or missing.
    pub fn drift(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (path, want) in &self.files {
            let same = match self.known.get(path) {
                Some(&same) => same,
                None => read_optional(path)?.as_ref() == Some(want),
            };
            if !same {
                out.push(path.clone());
            }
        }
        Ok(out)
    }

    /// Writes every changed file, all or nothing; returns what changed.
    pub fn apply(&self) -> anyhow::Result<Vec<PathBuf>> {
        let changed = self.drift()?;
        if let Some(root) = &self.root {
            for path in &changed {
                ensure_inside(root, path)?;
            }
        }
        let mut tx = Transaction::default();
        let result = self.commit(&changed, &mut tx);
        if let Err(err) = result {
            return match tx.rollback() {
                Ok(()) => Err(err.context("nothing was changed")),
                Err(rb) => Err(err.context(format!(
                    "and restoring the chart failed too, check these files by hand: {rb:#}"
                ))),
            };
        }
        Ok(changed)
    }

    fn commit(&self, changed: &[PathBuf], tx: &mut Transaction) -> anyhow::Result<()> {
        for path in changed {
            tx.stage(path, &self.files[path])?;
        }
        tx.replace_all()
    }
}

/// Refuses a path outside `root` or reached through a symlink (a link inside a chart may point
/// anywhere; writing through it would change a file the chart does not own).
pub fn ensure_inside(root: &Path, path: &Path) -> anyhow::Result<()> {
    let rel = path.strip_prefix(root).map_err(|_| {
        anyhow::anyhow!(
            "refusing to write '{}': it is outside '{}'",
            path.display(),
            root.display()
        )
    })?;
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => bail!(
                "refusing to write '{}': '{}' is a symlink, and chartgen never writes through links; replace the link with the file itself",
                path.display(),
                at.display()
            ),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(e).with_context(|| format!("cannot inspect '{}'", at.display())),
        }
    }
    Ok(())
}

/// A file's content and mode before `apply` touched it (None: it did not exist).
type Previous = Option<(Vec<u8>, u32)>;

/// What `apply` did so far, so it can be undone.
#[derive(Default)]
struct Transaction {
    /// (target, temporary holding its new content; removed when dropped unless persisted).
    staged: Vec<(PathBuf, NamedTempFile)>,
    /// Targets replaced or removed, with what they were before.
    done: Vec<(PathBuf, Previous)>,
    created_dirs: Vec<PathBuf>,
}

impl Transaction {
    /// Writes `content` into a fresh temporary beside `path` (created exclusively, so a planted
    /// link is never followed), with the mode of the file it will replace.
    fn stage(&mut self, path: &Path, content: &str) -> anyhow::Result<()> {
        let dir = parent(path);
        self.create_dirs(dir)?;
        let mode = fs::metadata(path).ok().map(|m| m.permissions());
        let tmp = temporary(path, content.as_bytes(), mode)
            .with_context(|| format!("cannot stage '{}'", path.display()))?;
        self.staged.push((path.to_path_buf(), tmp));
        Ok(())
    }

    fn create_dirs(&mut self, dir: &Path) -> anyhow::Result<()> {
        let mut missing = Vec::new();
        let mut at = dir;
        while !at.as_os_str().is_empty() && !at.exists() {
            missing.push(at.to_path_buf());
            at = parent(at);
        }
        for d in missing.into_iter().rev() {
            fs::create_dir(&d).with_context(|| format!("cannot create '{}'", d.display()))?;
            self.created_dirs.push(d);
        }
        Ok(())
    }

    fn replace_all(&mut self) -> anyhow::Result<()> {
        while !self.staged.is_empty() {
            let (path, tmp) = self.staged.remove(0);
            let before = previous(&path)?;
            tmp.persist(&path)
                .map_err(|e| e.error)
                .with_context(|| format!("cannot move '{}' into place", path.display()))?;
            self.done.push((path, before));
        }
        Ok(())
    }

    /// Restores every replaced or removed file, newest first, and removes temporaries and the
    /// directories `stage` created. Reports every file it could not restore.
    fn rollback(mut self) -> anyhow::Result<()> {
        let mut failed = Vec::new();
        self.staged.clear();
        for (path, before) in self.done.drain(..).rev() {
            let restored = match before {
                None => fs::remove_file(&path),
                Some((bytes, mode)) => restore(&path, &bytes, mode),
            };
            if let Err(e) = restored {
                failed.push(format!("'{}': {e}", path.display()));
            }
        }
        for dir in self.created_dirs.drain(..).rev() {
            let _ = fs::remove_dir(dir);
        }
        if failed.is_empty() {
            Ok(())
        } else {
            bail!("{}", failed.join("; "))
        }
    }
}

/// The content and mode a target has now (None when it does not exist).
fn previous(path: &Path) -> anyhow::Result<Previous> {
    match fs::read(path) {
        Ok(bytes) => {
            let mode = fs::metadata(path)
                .with_context(|| format!("cannot inspect '{}'", path.display()))?
                .permissions()
                .mode();
            Ok(Some((bytes, mode)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read '{}'", path.display())),
    }
}

fn restore(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mode = Some(fs::Permissions::from_mode(mode));
    temporary(path, bytes, mode)?.persist(path)?;
    Ok(())
}

/// The one way chartgen writes a file: `bytes` in a new temporary beside `path` (created
/// exclusively, so a planted link is never written through), synced, with `mode` when given
/// (else a new file's usual 0666 less the umask, not tempfile's private 0600); renaming it onto
/// `path` is the caller's step.
fn temporary(
    path: &Path,
    bytes: &[u8],
    mode: Option<fs::Permissions>,
) -> std::io::Result<NamedTempFile> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.chartgen-"))
        .suffix(".tmp")
        .permissions(fs::Permissions::from_mode(0o666))
        .tempfile_in(parent(path))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Some(mode) = mode {
        tmp.as_file().set_permissions(mode)?;
    }
    Ok(tmp)
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Largest file chartgen reads: far above any chart file, CRD or settings file.
pub const MAX_READ: u64 = 8 << 20;

/// Reads a text file, naming it in the error; see [`read_optional`].
pub fn read(path: &Path) -> anyhow::Result<String> {
    read_optional(path)?
        .ok_or_else(|| anyhow::anyhow!("cannot read '{}': no such file", path.display()))
}

/// Reads a text file of at most [`MAX_READ`] bytes; None when it does not exist. Anything but a
/// regular file is refused before it is opened (a FIFO blocks the reader, a device such as
/// /dev/zero never ends), and a file that grows past the cap while it is read is refused.
pub fn read_optional(path: &Path) -> anyhow::Result<Option<String>> {
    let regular = |m: &fs::Metadata| -> anyhow::Result<()> {
        if !m.is_file() {
            bail!(
                "refusing to read '{}': it is not a regular file ({}); replace it with the file itself",
                path.display(),
                kind_of(m)
            );
        }
        if m.len() > MAX_READ {
            bail!(
                "'{}' is larger than {} MiB; chartgen refuses it",
                path.display(),
                MAX_READ >> 20
            );
        }
        Ok(())
    };
    match fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read '{}'", path.display())),
        Ok(m) => regular(&m)?,
    }
    let file = fs::File::open(path).with_context(|| format!("cannot read '{}'", path.display()))?;
    regular(&file.metadata()?)?;
    let mut bytes = Vec::new();
    file.take(MAX_READ + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read '{}'", path.display()))?;
    if bytes.len() as u64 > MAX_READ {
        bail!(
            "'{}' is larger than {} MiB; chartgen refuses it",
            path.display(),
            MAX_READ >> 20
        );
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| anyhow::anyhow!("'{}' is not UTF-8 text", path.display()))
}

fn kind_of(m: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("chartgen-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn listing(dir: &Path) -> Vec<String> {
        // Every file under `dir`, temporaries included.
        let mut names: Vec<String> = walkdir::WalkDir::new(dir)
            .into_iter()
            .map(Result::unwrap)
            .filter(|e| !e.file_type().is_dir())
            .map(|e| e.path().strip_prefix(dir).unwrap().display().to_string())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_failed_rename_restores_everything_and_leaves_no_temporaries() {
        let dir = scratch("rollback");
        fs::write(dir.join("a.yaml"), "old a\n").unwrap();
        fs::write(dir.join("c.yaml"), "old c\n").unwrap();
        let before = listing(&dir);
        let mut tx = Transaction::default();
        tx.stage(&dir.join("a.yaml"), "new a\n").unwrap();
        tx.stage(&dir.join("b/new.yaml"), "new b\n").unwrap();
        tx.stage(&dir.join("c.yaml"), "new c\n").unwrap();
        // The last temporary vanishes, so its rename fails after `a` and `b` moved into place.
        fs::remove_file(tx.staged[2].1.path()).unwrap();
        assert!(tx.replace_all().is_err());
        assert_eq!(fs::read_to_string(dir.join("a.yaml")).unwrap(), "new a\n");
        tx.rollback().unwrap();
        assert_eq!(fs::read_to_string(dir.join("a.yaml")).unwrap(), "old a\n");
        assert_eq!(fs::read_to_string(dir.join("c.yaml")).unwrap(), "old c\n");
        assert!(
            !dir.join("b").exists(),
            "a directory created for staging is removed"
        );
        assert_eq!(listing(&dir), before, "no temporaries left");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn drift_trusts_the_content_its_caller_read() {
        let dir = scratch("known");
        fs::write(dir.join("read.yaml"), "changed since\n").unwrap();
        fs::write(dir.join("unread.yaml"), "old\n").unwrap();
        let mut plan = Plan::confined(&dir);
        plan.add_read(dir.join("read.yaml"), "same\n".into(), Some("same\n"));
        plan.add_read(dir.join("new.yaml"), "new\n".into(), None);
        plan.add(dir.join("unread.yaml"), "old\n".into());
        assert_eq!(plan.drift().unwrap(), [dir.join("new.yaml")]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn writes_keep_the_file_mode_and_refuse_links_and_outside_paths() {
        let dir = scratch("confine");
        let outside = scratch("confine-outside");
        fs::write(dir.join("run.sh"), "old").unwrap();
        fs::set_permissions(dir.join("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
        let mut plan = Plan::confined(&dir);
        plan.add(dir.join("run.sh"), "new".into());
        plan.apply().unwrap();
        let mode = fs::metadata(dir.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);

        std::os::unix::fs::symlink(&outside, dir.join("linked")).unwrap();
        let mut plan = Plan::confined(&dir);
        plan.add(dir.join("linked/x.yaml"), "x".into());
        let err = plan.apply().unwrap_err().to_string();
        assert!(err.contains("is a symlink"), "{err}");
        assert!(!outside.join("x.yaml").exists());

        let mut plan = Plan::confined(&dir);
        plan.add(outside.join("y.yaml"), "y".into());
        assert!(plan.apply().unwrap_err().to_string().contains("outside"));
        fs::remove_dir_all(dir).unwrap();
        fs::remove_dir_all(outside).unwrap();
    }
}
