//! `--lift-literal-count KEY`: rewrites a literal count line to read a new values key whose
//! default is the literal, so the chart renders as before and chartgen app can then wire it.

use std::path::Path;

use anyhow::bail;

use super::chart::{Chart, Template};
use super::discover::{Shape, target_of};
use super::settings::{self, Settings};
use super::{Note, target, values};
use crate::output::Plan;

/// `--lift-literal-count KEY`: the edit that makes a literal count (`instances: 2`) read the new
/// top-level values key KEY, whose default is that literal, so the chart renders byte for byte
/// as before and chartgen app can then wire the key.
pub fn lift_literal(
    dir: &Path,
    flags: Settings,
    key: &str,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<Plan> {
    if !(key.starts_with(|c: char| c.is_ascii_alphabetic())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        bail!(
            "--lift-literal-count {key:?}: the new key must be a plain top-level values key (letters, digits, `_`), e.g. replicas"
        );
    }
    // Before anything is written: a flag the run that follows would refuse must not leave the
    // lift behind.
    flags
        .check(settings::Origin::Flags)
        .map_err(|e| anyhow::anyhow!(e))?;
    let chart = Chart::read(dir, warnings)?;
    let settings = flags.over(chart.settings.clone());
    if values::has_path(&chart.values, key) {
        bail!(
            "values.yaml already has `{key}`; --lift-literal-count needs a new key, so the literal becomes its default"
        );
    }
    let (known, field, kind) = target_of(&chart, &settings)?;
    let shape = Shape {
        field: &field,
        kind: &kind,
        parents: known.parents(),
    };
    let mut plan = Plan::confined(dir);
    let mut literal: Option<String> = None;
    for template in chart.sources() {
        if let Some(text) = lift_file(template, &shape, key, &mut literal)? {
            plan.add_read(&template.path, text, Some(&template.text));
        }
    }
    let Some(value) = literal else {
        bail!(
            "no {kind} count line under '{}' is a literal (`{field}: 2`); --lift-literal-count rewrites only those: drop it",
            chart.paths.templates.display()
        );
    };
    let values_new = with_key(&chart.values_text, &shape, key, &value);
    plan.add_read(&chart.paths.values, values_new, Some(&chart.values_text));
    Ok(plan)
}

/// The template with each literal count line of `shape` reading `.Values.KEY` instead (None:
/// it has none); `literal` is the value every such line must share.
fn lift_file(
    template: &Template,
    shape: &Shape,
    key: &str,
    literal: &mut Option<String>,
) -> anyhow::Result<Option<String>> {
    let Template { path, text, .. } = template;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let bare: Vec<&str> = text.lines().collect();
    let literals: std::collections::HashMap<usize, (String, (usize, usize))> = shape
        .counts(path, text, &bare)?
        .into_iter()
        .filter_map(|(i, c)| match c {
            target::Count::Literal { value, span } => Some((i, (value, span))),
            _ => None,
        })
        .collect();
    if literals.is_empty() {
        return Ok(None);
    }
    let field = shape.field;
    let mut out = String::with_capacity(text.len() + 64);
    for (i, line) in lines.iter().enumerate() {
        let Some((value, span)) = literals.get(&i).cloned() else {
            out.push_str(line);
            continue;
        };
        let at = format!("{}:{}", path.display(), i + 1);
        // Helm reads values numbers as floats: 1e6 and up would render as `1e+06`.
        if value.len() > 6 || value.len() > 1 && value.starts_with('0') {
            bail!("{at}: the literal {value} would not render the same from values.yaml");
        }
        match literal {
            Some(v) if *v != value => bail!(
                "{at}: the literal {value} differs from the {v} of another count line; make them one values key by hand"
            ),
            _ => *literal = Some(value.clone()),
        }
        // `.Values` is the root's only outside `with`/`range`; `$.Values` is everywhere.
        let reads = |root: &str| {
            let new = format!(
                "{}{{{{ {root}.Values.{key} }}}}{}",
                &line[..span.0],
                &line[span.1..]
            );
            let mut probe = bare.clone();
            probe[i] = new.trim_end_matches(['\n', '\r']);
            let ok = matches!(target::count_at(&probe.join("\n"), &probe, i, field),
                Some(target::Count::Values { key: k, .. }) if k == key);
            ok.then_some(new)
        };
        let new = reads("")
            .or_else(|| reads("$"))
            .ok_or_else(|| anyhow::anyhow!("{at}: chartgen cannot make this line read `.Values.{key}`; write `{field}: {{{{ $.Values.{key} }}}}` and `{key}: {value}` in values.yaml by hand"))?;
        out.push_str(&new);
    }
    Ok(Some(out))
}

/// values.yaml with the new top-level `key: value` appended, documented in the file's convention.
fn with_key(values_text: &str, shape: &Shape, key: &str, value: &str) -> String {
    let (kind, field) = (shape.kind, shape.field);
    let doc = format!("The {kind}'s {field} (chartgen app --lift-literal-count).");
    let comment = match values::convention(values_text) {
        values::Convention::HelmDocs => format!("# -- {doc}"),
        values::Convention::Bitnami => format!("## @param {key} {doc}"),
        values::Convention::Cozy => format!("## @param {{int}} {key} - {doc}"),
    };
    let mut values_new = values_text.to_owned();
    if !values_new.is_empty() && !values_new.ends_with('\n') {
        values_new.push('\n');
    }
    values_new.push_str(&format!("\n{comment}\n{key}: {value}\n"));
    values_new
}
