//! The backtest's table as CSV or JSON. Every file is written beside its destination and renamed
//! into place, so a failed run never leaves a half-written table; a destination that is a
//! symbolic link or not a regular file (`/dev/stdout`, a FIFO) is written through as a stream,
//! never replaced.
use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use scaler_core::replay::{HpaSpec, Row};

/// One row as the files show it.
#[derive(Serialize)]
struct Line<'a> {
    /// RFC 3339, UTC.
    time: String,
    unix_seconds: i64,
    load: Option<f64>,
    recommended: Option<u32>,
    reason: Option<&'static str>,
    simulated: u32,
    observed: Option<u32>,
    error: Option<&'a str>,
}

impl<'a> From<&'a Row> for Line<'a> {
    fn from(row: &'a Row) -> Self {
        Self {
            time: rfc3339(row.time),
            unix_seconds: row.time,
            load: row.load,
            recommended: row.recommended,
            reason: row.reason.map(|r| r.as_str()),
            simulated: row.simulated,
            observed: row.observed,
            error: row.error.as_deref(),
        }
    }
}

pub fn rfc3339(unix_seconds: i64) -> String {
    jiff::Timestamp::from_second(unix_seconds)
        .map_or_else(|_| unix_seconds.to_string(), |t| t.to_string())
}

/// What was replayed, for the JSON file's header.
#[derive(Serialize)]
pub struct Header<'a> {
    pub namespace: &'a str,
    pub cluster: &'a str,
    pub scaled_object: &'a str,
    pub metric: &'static str,
    pub target: f64,
    pub from: String,
    pub to: String,
    pub step_seconds: u64,
    pub query: &'a str,
    pub hpa: &'a HpaSpec,
}

fn write_csv<T: Serialize>(
    out: impl std::io::Write,
    items: impl IntoIterator<Item = T>,
) -> anyhow::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    for item in items {
        writer.serialize(item)?;
    }
    writer.flush()?;
    Ok(())
}

#[derive(Serialize)]
struct Document<'a> {
    #[serde(flatten)]
    header: &'a Header<'a>,
    rows: Vec<Line<'a>>,
}

fn document<'a>(header: &'a Header<'a>, rows: &'a [Row]) -> Document<'a> {
    Document {
        header,
        rows: rows.iter().map(Line::from).collect(),
    }
}

pub fn csv(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    atomic_write(path, |file| write_csv(file, rows.iter().map(Line::from)))
        .with_context(|| format!("--csv {}", path.display()))
}

pub fn json(path: &Path, header: &Header<'_>, rows: &[Row]) -> anyhow::Result<()> {
    atomic_write(path, |file| {
        serde_json::to_writer_pretty(&mut *file, &document(header, rows))?;
        file.write_all(b"\n")?;
        Ok(())
    })
    .with_context(|| format!("--json {}", path.display()))
}

/// `-o`: the rows to stdout; the table shows the first and last rows and every row where the
/// recommendation, reason, simulated or observed count, or the error changed.
pub fn print_rows(
    format: super::Format,
    header: &Header<'_>,
    rows: &[Row],
    zone: &jiff::tz::TimeZone,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match format {
        super::Format::Csv => write_csv(&mut out, rows.iter().map(Line::from))?,
        super::Format::Json => {
            serde_json::to_writer_pretty(&mut out, &document(header, rows))?;
            out.write_all(b"\n")?;
        }
        super::Format::Table => out.write_all(changes_table(rows, zone).as_bytes())?,
    }
    out.flush()?;
    Ok(())
}

/// `-o` with `--tune`: one line per setting.
pub fn print_settings(format: super::Format, lines: &[super::tune::Line]) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match format {
        super::Format::Csv => write_csv(&mut out, lines)?,
        super::Format::Json => {
            serde_json::to_writer_pretty(&mut out, lines)?;
            out.write_all(b"\n")?;
        }
        super::Format::Table => out.write_all(super::tune::table(lines).as_bytes())?,
    }
    out.flush()?;
    Ok(())
}

fn changes_table(rows: &[Row], zone: &jiff::tz::TimeZone) -> String {
    let mut out = format!(
        "{:<25} {:>10} {:>11} {:<14} {:>9} {:>8}  {}\n",
        "time", "load", "recommended", "reason", "simulated", "observed", "error"
    );
    let key = |r: &Row| {
        (
            r.recommended,
            r.reason,
            r.simulated,
            r.observed,
            r.error.is_some(),
        )
    };
    for (i, row) in rows.iter().enumerate() {
        let changed = i == 0 || i + 1 == rows.len() || key(&rows[i - 1]) != key(row);
        if !changed {
            continue;
        }
        let time = jiff::Timestamp::from_second(row.time)
            .map(|t| {
                t.to_zoned(zone.clone())
                    .strftime("%Y-%m-%d %H:%M:%S %Z")
                    .to_string()
            })
            .unwrap_or_default();
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        out += &format!(
            "{time:<25} {:>10} {:>11} {:<14} {:>9} {:>8}  {}\n",
            or_dash(row.load.map(|l| format!("{l:.1}"))),
            or_dash(row.recommended.map(|r| r.to_string())),
            row.reason.map_or("-", |r| r.as_str()),
            row.simulated,
            or_dash(row.observed.map(|o| o.to_string())),
            row.error.as_deref().unwrap_or(""),
        );
    }
    out
}

/// Where an output goes, from what is at its path now.
#[derive(Debug, PartialEq, Eq)]
enum Destination {
    /// Nothing, or a regular file: written beside it and renamed into place.
    File,
    /// A symbolic link (`/dev/stdout`), or what is not a regular file (a FIFO, a device):
    /// written through as a stream; a rename would replace it with a regular file.
    Stream,
}

fn destination(path: &Path) -> anyhow::Result<Destination> {
    let link = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Destination::File),
        other => other?,
    };
    if link.file_type().is_file() {
        return Ok(Destination::File);
    }
    // Through the link, if it is one: a directory is never written.
    let target = std::fs::metadata(path).context("cannot follow the path")?;
    anyhow::ensure!(!target.is_dir(), "is a directory: give a file path");
    Ok(Destination::Stream)
}

/// Writes through `write` into a temporary file in the destination's directory, then renames
/// it; a symbolic link, FIFO or device at `path` is written through as a stream instead.
pub fn atomic_write(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let name = path.file_name().context("not a file path")?;
    if destination(path)? == Destination::Stream {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        let mut stream = std::io::BufWriter::new(file);
        write(&mut stream)?;
        stream.into_inner()?;
        return Ok(());
    }
    // A fresh name in the destination's directory (so the rename stays on one file system),
    // removed when anything fails: never a half-written file at `path`.
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let temporary = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".partial")
        .tempfile_in(directory)?;
    let (file, temporary) = temporary.into_parts();
    let mut file = std::io::BufWriter::new(file);
    write(&mut file)?;
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    temporary.persist(path)?;
    Ok(())
}

/// Whether two output paths name the same file: the same inode when both exist, else the same
/// path once their directories are resolved.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    let resolved = |p: &Path| {
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::canonicalize(parent)
            .ok()
            .map(|d| d.join(p.file_name().unwrap_or_default()))
    };
    a == b || resolved(a).is_some_and(|x| resolved(b).is_some_and(|y| x == y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) -> anyhow::Result<()> {
        atomic_write(path, |f| Ok(std::io::Write::write_all(f, text.as_bytes())?))
    }

    #[test]
    fn the_printed_table_has_the_first_last_and_changed_rows() {
        let row = |time: i64, simulated: u32, error: bool| Row {
            time,
            load: (!error).then_some(20.0),
            recommended: (!error).then_some(2),
            reason: (!error).then_some(scaler_core::decision::Reason::Load),
            simulated,
            observed: (!error).then_some(3),
            error: error.then(|| "no instance series".into()),
        };
        let rows = [
            row(0, 3, false),
            row(60, 3, false),
            row(120, 2, false),
            row(180, 2, false),
            row(240, 2, true),
            row(300, 2, true),
            row(360, 2, true),
        ];
        let berlin = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
        let table = changes_table(&rows, &berlin);
        let times: Vec<&str> = table.lines().skip(1).map(|l| &l[11..19]).collect();
        assert_eq!(
            times,
            ["01:00:00", "01:02:00", "01:04:00", "01:06:00"],
            "{table}"
        );
        assert!(
            table.contains("CET") && table.contains("no instance series"),
            "{table}"
        );
    }

    #[test]
    fn links_and_non_regular_files_are_written_through_never_replaced() {
        let dir = std::env::temp_dir().join(format!("backtest-output-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A regular file is replaced whole.
        let file = dir.join("out.csv");
        std::fs::write(&file, "old and longer").unwrap();
        write(&file, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        // A symbolic link stays a link; what it points to gets the output.
        let link = dir.join("link.csv");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        write(&link, "through").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "through");
        // A device is written as a stream, not replaced (as root a rename would replace it).
        let null = dir.join("null");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        write(&null, "gone").unwrap();
        let dev = std::fs::metadata("/dev/null").unwrap();
        assert!(!dev.is_file());
        // A directory is refused.
        let error = write(&dir, "x").unwrap_err();
        assert!(error.to_string().contains("directory"), "{error}");
        // One file under two names is one output.
        assert!(same_file(&file, &link));
        assert!(same_file(
            &dir.join("new.json"),
            &dir.join(".").join("new.json")
        ));
        assert!(!same_file(&dir.join("a.json"), &dir.join("b.json")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
