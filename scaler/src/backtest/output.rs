//! The backtest's table as CSV or JSON. Every file is written beside its destination and renamed
//! into place, so a failed run never leaves a half-written table.
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

pub fn csv(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    atomic_write(path, |file| {
        let mut writer = csv::Writer::from_writer(file);
        for row in rows {
            writer.serialize(Line::from(row))?;
        }
        writer.flush()?;
        Ok(())
    })
    .with_context(|| format!("--csv {}", path.display()))
}

pub fn json(path: &Path, header: &Header<'_>, rows: &[Row]) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Document<'a> {
        #[serde(flatten)]
        header: &'a Header<'a>,
        rows: Vec<Line<'a>>,
    }
    let document = Document {
        header,
        rows: rows.iter().map(Line::from).collect(),
    };
    atomic_write(path, |file| {
        serde_json::to_writer_pretty(&mut *file, &document)?;
        file.write_all(b"\n")?;
        Ok(())
    })
    .with_context(|| format!("--json {}", path.display()))
}

/// Writes through `write` into a temporary file in the destination's directory, then renames it.
pub fn atomic_write(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let name = path.file_name().context("not a file path")?;
    let mut temporary = path.to_path_buf();
    temporary.set_file_name(format!(".{}.partial", name.to_string_lossy()));
    let result = (|| {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        write(&mut file)?;
        file.into_inner()?.sync_all()?;
        std::fs::rename(&temporary, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}
