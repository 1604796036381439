//! Discovery: what the target is (its kind, engine and replica field), its count lines and the
//! values key they read, who else reads the count, and the Poolers next to a Cluster; from the
//! chart model, reading nothing (bar the refusal that looks into the chart's dependencies).

mod count;
mod readers;
mod spec;

use std::path::Path;

use anyhow::{Context, bail};

use super::chart::{Chart, Rewritten, Template};
use super::engine::{self, Engine};
use super::replica::{Counted, ReplicaLine};
use super::settings::{self, Settings};
use super::target::{self, Around};
use super::{AppSpec, Note, pooler};
pub(super) use count::Shape;
use count::{count_key, elsewhere, no_count_line, rendered_kinds, target_docs};
use readers::other_readers;
use spec::target_spec;

/// What the chart says about the target: the settings of this run and the target, with the
/// replica lines rewritten.
pub(super) struct Discovered {
    pub(super) settings: Settings,
    pub(super) rewritten: Vec<Rewritten>,
    pub(super) spec: AppSpec,
    pub(super) max_sync: String,
    pub(super) notes: Vec<String>,
}

/// Finds the target (its kind, count line, name, namespace, conditions and quorum) and rewrites
/// its replica lines, from the chart as read; writes nothing.
pub(super) fn discover(
    chart: &Chart,
    flags: Settings,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<Discovered> {
    flags
        .check(settings::Origin::Flags)
        .map_err(|e| anyhow::anyhow!(e))?;
    let settings = flags.over(chart.settings.clone());
    let count = count_lines(chart, &settings, warnings)?;
    let mut notes = Vec::new();
    let (mut spec, max_sync) = target_spec(&count, &settings, &chart.values, &mut notes)?;
    notes.extend(other_readers(chart, &spec, &count.found));
    let mut rewritten = count.rewritten;
    // A Pooler serves a CNPG Cluster: the budget the scaler bounds it with is that Cluster's.
    if spec.engine == Engine::Cnpg {
        let poolers = pooler::wire(chart, &spec.values_key, &rewritten)?;
        for (path, text) in poolers.rewritten {
            match rewritten.iter_mut().find(|(p, _)| *p == path) {
                Some(entry) => entry.1 = text,
                None => rewritten.push((path, text)),
            }
        }
        spec.poolers = poolers.wired;
        spec.all_poolers_wired = poolers.all_wired;
        notes.extend(poolers.notes);
    }
    Ok(Discovered {
        settings,
        rewritten,
        spec,
        max_sync,
        notes,
    })
}

/// The target's kind and its count lines, found and rewritten.
struct CountLines<'a> {
    known: &'static engine::Known,
    field: String,
    kind: String,
    values_key: String,
    found: Vec<Found<'a>>,
    rewritten: Vec<Rewritten>,
}

/// Discovers the kind (or takes `--target-kind`), refuses a target chartgen cannot follow (none
/// here, one per `range` entry), finds the values key of the count and rewrites its lines.
fn count_lines<'a>(
    chart: &'a Chart,
    settings: &Settings,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<CountLines<'a>> {
    let (known, field, kind) = target_of(chart, settings)?;
    let shape = Shape {
        field: &field,
        kind: &kind,
        parents: known.parents(),
    };
    let docs = target_docs(chart.sources(), &kind);
    if docs.is_empty() {
        return Err(elsewhere(chart, &kind, warnings)?);
    }
    for d in &docs {
        if let Err(Around::Range(over)) = target::conditions(d.text, d.line) {
            bail!(
                "{}:{}: the {kind} is rendered inside `range {over}`, one per entry; chartgen generates one ScaledObject for one {kind} and cannot follow the entries: give each {kind} its own chart (or a subchart per entry) and run chartgen app on it, or render a single {kind} here",
                d.path.display(),
                d.line + 1
            );
        }
    }
    let values_key = match settings.values_key.clone() {
        Some(key) => key,
        None => count_key(chart, &shape)?,
    };
    let rl = ReplicaLine {
        field: &field,
        key: &values_key,
        chart: &chart.name,
        helpers: "autoscaling",
    };
    let (found, rewritten) = rewrite_replica_lines(chart, &rl, &shape)?;
    Ok(CountLines {
        known,
        field,
        kind,
        values_key,
        found,
        rewritten,
    })
}

/// The target's engine, replica field and kind: from the flags, else discovered from the kinds
/// the chart's templates render.
pub(super) fn target_of(
    chart: &Chart,
    settings: &Settings,
) -> anyhow::Result<(&'static engine::Known, String, String)> {
    let known = engine::discover(
        settings.target_kind.as_deref(),
        &rendered_kinds(chart)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .map_err(|e| anyhow::anyhow!("under '{}': {e}", chart.paths.templates.display()))?;
    let field = settings
        .replica_field
        .clone()
        .unwrap_or_else(|| known.field().into());
    let kind = settings
        .target_kind
        .clone()
        .unwrap_or_else(|| known.kind.into());
    Ok((known, field, kind))
}

/// A template that renders the replica field: its path, text and the 0-based line.
struct Found<'a> {
    path: &'a Path,
    text: &'a str,
    line: usize,
}

/// Rewrites every count line of the target (`shape`): where each was found, and the new texts.
fn rewrite_replica_lines<'a>(
    chart: &'a Chart,
    rl: &ReplicaLine,
    shape: &Shape,
) -> anyhow::Result<(Vec<Found<'a>>, Vec<Rewritten>)> {
    let mut found = Vec::new();
    let mut rewritten = Vec::new();
    for Template { path, text, .. } in chart.sources() {
        let lines: Vec<&str> = text.lines().collect();
        // Only lines in a `kind` manifest: another reader (a Pooler's instances) is a note.
        let spans: std::collections::HashMap<usize, (usize, usize)> = shape
            .counts(path, text, &lines)?
            .into_iter()
            .filter_map(|(i, c)| match c {
                target::Count::Values { key, span, .. } if key == rl.key => Some((i, span)),
                _ => None,
            })
            .collect();
        let count_at = |i: usize| {
            spans.get(&i).map(|&span| Counted {
                span,
                arg: "$".into(),
            })
        };
        let rw = rl
            .rewrite(text, &count_at)
            .with_context(|| format!("in '{}'", path.display()))?;
        if rw.found == 0 {
            continue;
        }
        for &line in &rw.lines {
            found.push(Found { path, text, line });
        }
        rewritten.push((path.clone(), rw.text));
    }
    if found.is_empty() {
        return Err(no_count_line(chart, shape, Some(rl.key))?);
    }
    Ok((found, rewritten))
}
