//! Writing: every rendered file checked by loading it back, then planned with what the chart
//! holds now; the plan's all-or-nothing staged write and `--check` are output.rs's.

use std::path::Path;

use anyhow::bail;

use super::chart::Chart;
use super::discover::Discovered;
use super::render::Rendered;
use super::settings::Settings;
use super::{Note, Outcome, values};
use crate::output::Plan;

/// Checks every rendered file by loading it back and plans the writes, each with what the
/// chart holds now (so `--check` and the write compare without reading it again); a file that
/// would not load stops the run before anything is written.
pub(super) fn write(chart: &Chart, d: Discovered, files: Rendered) -> anyhow::Result<Outcome> {
    let paths = &chart.paths;
    let spec = d.spec;
    reparse(&paths.values, || {
        let root = values::parse(&files.values)?;
        values::merge(&root, spec.defaults(""))?;
        if values::has_path(&chart.values, &spec.values_key)
            && !values::has_path(&root, &spec.values_key)
        {
            bail!("`{}` is lost", spec.values_key);
        }
        Ok(())
    })?;
    reparse(&paths.schema, || {
        serde_json::from_str::<serde_json::Value>(&files.schema)?;
        Ok(())
    })?;
    reparse(&paths.settings, || {
        if Settings::parse(Some(&files.settings)).map_err(|e| anyhow::anyhow!(e))? != d.settings {
            bail!("the settings read back differ");
        }
        Ok(())
    })?;
    let mut plan = Plan::confined(&chart.dir);
    let owned = [
        (paths.values.clone(), files.values),
        (paths.schema.clone(), files.schema),
        (paths.settings.clone(), files.settings),
    ];
    for (path, text) in d.rewritten.into_iter().chain(owned).chain(files.generated) {
        let current = chart.current(&path);
        plan.add_read(path, text, current);
    }
    let notes = d.notes.into_iter().chain(files.notes).map(Note::Info);
    Ok(Outcome {
        plan,
        spec,
        notes: notes.collect(),
    })
}

/// Checks a file chartgen is about to write by parsing it back, so a chart is never left with a
/// values.yaml, schema or settings file that Helm or the next run cannot load.
fn reparse(path: &Path, check: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    check().map_err(|e| {
        anyhow::anyhow!(
            "the new '{}' would not load ({e:#}), so nothing was written; the file has a shape chartgen cannot edit: rewrite that part in plain block style and run chartgen app again",
            path.display()
        )
    })
}
