//! Rendering: the new text of every file chartgen app owns (the values block merged into
//! values.yaml, the schema property, the settings, the generated templates), from the chart
//! model and what discovery found; pure but for the templates it renders with.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde::Serialize;

use super::chart::Chart;
use super::discover::Discovered;
use super::{AppSpec, MARKER, schema, values};
use crate::render::Renderer;

#[derive(Serialize)]
struct Ctx<'a> {
    chart: &'a str,
    spec: &'a AppSpec,
    /// Go-template expression of the synchronous quorum as an int; empty when the chart has no
    /// quorum setting (the trigger then leaves `maxSyncReplicas` to the scaler's own reading).
    max_sync: String,
    v: serde_json::Map<String, serde_json::Value>,
    convention: values::Convention,
}

/// The new text of every file chartgen app owns, from what `discover` found.
pub(super) struct Rendered {
    pub(super) values: String,
    pub(super) schema: String,
    pub(super) settings: String,
    /// The generated templates: (path, text).
    pub(super) generated: Vec<(PathBuf, String)>,
    /// What the author should know about the merges.
    pub(super) notes: Vec<String>,
}

/// Renders the values block (merged into values.yaml), the schema property (merged into
/// values.schema.json), the settings and the generated templates, from the chart as read;
/// writes nothing.
pub(super) fn render(chart: &Chart, d: &Discovered, r: &Renderer) -> anyhow::Result<Rendered> {
    let spec = &d.spec;
    let mut notes = Vec::new();
    let convention = values::convention(&chart.values_text);
    let ctx = Ctx {
        chart: &chart.name,
        spec,
        max_sync: d.max_sync.clone(),
        v: values::merge(&chart.values, spec.defaults(&spec.scaler_address))?,
        convention,
    };
    let values_new = values_file(chart, &ctx, r, &mut notes)?;
    let schema_new = schema_file(chart, &ctx, r, &mut notes)?;
    let mut generated = Vec::new();
    for (tmpl, file) in spec.generated() {
        let path = chart.paths.templates.join(file);
        if let Some(text) = chart.current(&path)
            && !text.starts_with(MARKER)
        {
            bail!(
                "'{}' exists and was not written by chartgen app; rename it so chartgen can add its own",
                path.display()
            );
        }
        generated.push((path, r.render(tmpl, &ctx)?));
    }
    Ok(Rendered {
        values: values_new,
        schema: schema_new,
        settings: d.settings.to_text(),
        generated,
        notes,
    })
}

/// values.yaml with the `autoscaling:` block merged in; `notes` says which keys it added to or
/// removed from the author's block.
fn values_file(
    chart: &Chart,
    ctx: &Ctx,
    r: &Renderer,
    notes: &mut Vec<String>,
) -> anyhow::Result<String> {
    let block = r.render("app/values-autoscaling.yaml", ctx)?;
    let (values_new, change) = values::merge_block(&chart.values_text, values::KEY, &block);
    if !change.added.is_empty() {
        notes.push(format!(
            "added {} to the existing `autoscaling:` block{}",
            change.added.join(", "),
            match ctx.convention {
                values::Convention::Cozy if change.added.iter().any(|k| k == "pooler") => {
                    "; add their `## @field` lines to the Autoscaling typedef, and for `pooler` the `## @typedef {struct} AutoscalingPooler` with its fields (a fresh block shows them), so cozyvalues-gen keeps them"
                }
                values::Convention::Cozy => {
                    "; add their `## @field` lines to the Autoscaling typedef so cozyvalues-gen keeps them"
                }
                _ => "",
            }
        ));
    }
    if !change.removed.is_empty() {
        notes.push(format!(
            "removed retired keys {} from `autoscaling:`",
            change.removed.join(", ")
        ));
    }
    Ok(values_new)
}

/// values.schema.json with the `autoscaling` property merged in (created when the chart has
/// none, which `notes` says).
fn schema_file(
    chart: &Chart,
    ctx: &Ctx,
    r: &Renderer,
    notes: &mut Vec<String>,
) -> anyhow::Result<String> {
    let existing = chart.schema.as_deref();
    if existing.is_none() {
        notes.push(format!(
            "created {} because the chart had none: it only describes `autoscaling`, so Helm validates nothing else",
            chart.paths.schema.display()
        ));
    }
    let property: serde_json::Value =
        serde_json::from_str(&r.render("app/values-autoscaling.schema.json", ctx)?)
            .context("templates/app/values-autoscaling.schema.json does not render to JSON")?;
    let policy = if ctx.convention == values::Convention::Cozy {
        schema::Existing::Keep
    } else {
        schema::Existing::Replace
    };
    Ok(schema::merge(existing, &property, policy)?)
}
