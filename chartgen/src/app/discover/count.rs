//! Where the target's count lines are: their shape, the values key they read, and the refusals
//! when the chart has none chartgen can rewrite (naming each line and the fix, or the
//! dependency that renders the target instead).

use std::path::Path;

use anyhow::bail;

use crate::app::Note;
use crate::app::chart::{self, Chart, Template};
use crate::app::target::{self, kind_of};

/// Where the count line sits: its field, in a manifest of `kind`, directly under `parents`
/// (empty: anywhere in that manifest).
pub(in crate::app) struct Shape<'a> {
    pub(in crate::app) field: &'a str,
    pub(in crate::app) kind: &'a str,
    pub(in crate::app) parents: &'a [&'a str],
}

/// Most `<field>:` lines one template may have: real charts have a few, and each costs a scan
/// of the file for the blocks around it.
const MAX_COUNT_LINES: usize = 64;

impl Shape<'_> {
    /// The count lines of the target in `text` (0-based line, what it renders); a template with
    /// more than MAX_COUNT_LINES `<field>:` lines is refused, so the scan stays linear.
    pub(in crate::app) fn counts(
        &self,
        path: &Path,
        text: &str,
        lines: &[&str],
    ) -> anyhow::Result<Vec<(usize, target::Count)>> {
        let field_line = |l: &str| {
            l.trim_start()
                .strip_prefix(self.field)
                .is_some_and(|r| r.starts_with(':'))
        };
        if lines
            .iter()
            .filter(|l| field_line(l))
            .nth(MAX_COUNT_LINES)
            .is_some()
        {
            bail!(
                "'{}' has more than {MAX_COUNT_LINES} `{}:` lines; chartgen refuses a template this repetitive to stay fast",
                path.display(),
                self.field
            );
        }
        Ok((0..lines.len())
            .filter(|&i| field_line(lines[i]) && self.holds(text, lines, i))
            .filter_map(|i| Some((i, target::count_at(text, lines, i, self.field)?)))
            .collect())
    }

    /// True when 0-based `line` of `text` is in a `kind` manifest under the right parents (a
    /// RedisFailover's `sentinel.replicas` is not its count).
    fn holds(&self, text: &str, lines: &[&str], line: usize) -> bool {
        let doc = target::doc_at(text, lines, line);
        if doc.top("kind") != Some(self.kind) {
            return false;
        }
        if self.parents.is_empty() {
            return true;
        }
        let above = target::ancestors(&doc, line);
        let want = self.parents.iter().rev().chain(std::iter::once(&"spec"));
        above.len() == self.parents.len() + 1 && above.iter().zip(want).all(|(a, w)| a == w)
    }
}

/// The values path the target's replica field renders from, read from its count lines (see
/// `target::count_at`); when none reads one, the refusal says line by line why and what to do.
pub(super) fn count_key(chart: &Chart, shape: &Shape) -> anyhow::Result<String> {
    let mut keys: Vec<String> = Vec::new();
    for Template { path, text, .. } in &chart.templates {
        let lines: Vec<&str> = text.lines().collect();
        for (_, count) in shape.counts(path, text, &lines)? {
            if let target::Count::Values { key, .. } = count
                && !keys.contains(&key)
            {
                keys.push(key);
            }
        }
    }
    match keys.as_slice() {
        [] => Err(no_count_line(chart, shape, None)?),
        [one] => Ok(one.clone()),
        many => bail!(
            "the {} templates render `{}` from several values ({}); pass --values-key with the one to scale",
            shape.kind,
            shape.field,
            names::echo_list(many)
        ),
    }
}

/// The refusal for a target none of whose count lines chartgen can rewrite (reading `want`, or
/// any one values key): each `field` line of the target with why and the fix.
pub(super) fn no_count_line(
    chart: &Chart,
    shape: &Shape,
    want: Option<&str>,
) -> anyhow::Result<anyhow::Error> {
    let field = shape.field;
    let path = shape
        .parents
        .iter()
        .chain([&field])
        .copied()
        .collect::<Vec<_>>()
        .join(".");
    let mut why = Vec::new();
    for Template {
        path: file, text, ..
    } in chart.sources()
    {
        let lines: Vec<&str> = text.lines().collect();
        for (i, count) in shape.counts(file, text, &lines)? {
            let at = format!("{}:{}: `{}`", file.display(), i + 1, lines[i].trim());
            why.push(match count {
                target::Count::Values { key, .. } => format!(
                    "{at} reads `.Values.{key}`, not `.Values.{}`: pass --values-key {key}",
                    want.unwrap_or_default()
                ),
                target::Count::Literal { value, .. } => format!(
                    "{at} is the literal {value}, which KEDA cannot move: pass --lift-literal-count KEY (e.g. replicas) to rewrite it as `{field}: {{{{ .Values.KEY }}}}` with `KEY: {value}` added to values.yaml, which renders the same"
                ),
                target::Count::Other(reason) => format!(
                    "{at}: {reason}; write it as `{field}: {{{{ $.Values.KEY }}}}`, reading the one values key of the count from the chart's root"
                ),
            });
        }
    }
    if why.is_empty() {
        // Name where the line should be: the deepest of the count's parents the target has.
        let mut parent = vec!["spec"];
        parent.extend(shape.parents);
        let mut at = Vec::new();
        for d in target_docs(chart.sources(), shape.kind) {
            let lines: Vec<&str> = d.text.lines().collect();
            let doc = target::doc_at(d.text, &lines, d.line);
            let found = (1..=parent.len())
                .rev()
                .find_map(|n| doc.line_of(&parent[..n]))
                .unwrap_or((d.line, lines[d.line]));
            at.push(format!(
                "{}:{}: `{}`",
                d.path.display(),
                found.0 + 1,
                found.1.trim()
            ));
        }
        return Ok(anyhow::anyhow!(
            "no {} manifest has a `spec.{path}` line chartgen can read ({}): it is rendered some other way (a `range` over a map, `toYaml`, a helper). chartgen rewrites the line that renders the count: write `{field}: {{{{ $.Values.KEY }}}}` out under `{}:` there, reading the one values key of the count (and leave it out of what renders the rest), then run chartgen app again",
            shape.kind,
            at.join(", "),
            parent.last().unwrap_or(&"spec"),
        ));
    }
    Ok(anyhow::anyhow!(
        "no {} count line chartgen can rewrite (`spec.{path}` reading one values key):\n  {}",
        shape.kind,
        why.join("\n  ")
    ))
}

/// The kinds of the chart's own templates' top-level `kind:` lines (chartgen's files left out).
pub(super) fn rendered_kinds(chart: &Chart) -> Vec<String> {
    let mut kinds = Vec::new();
    for t in chart.sources() {
        for line in t.text.lines() {
            if let Some(kind) = kind_of(line)
                && !kinds.iter().any(|k| k == kind)
            {
                kinds.push(kind.to_owned());
            }
        }
    }
    kinds
}

/// A `kind:` line of the target's kind in a template: its path, text and the 0-based line.
pub(super) struct TargetDoc<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
    pub(super) line: usize,
}

/// Every document of `kind` in `templates`.
pub(super) fn target_docs<'a>(
    templates: impl Iterator<Item = &'a Template>,
    kind: &str,
) -> Vec<TargetDoc<'a>> {
    let mut out = Vec::new();
    for t in templates {
        for (line, l) in t.text.lines().enumerate() {
            if kind_of(l) == Some(kind) {
                out.push(TargetDoc {
                    path: &t.path,
                    text: &t.text,
                    line,
                });
            }
        }
    }
    out
}

/// The refusal for a chart whose own templates render no `kind`: which dependency does (a local
/// subchart) or may (a packaged one), and what to do. Reads the local dependencies' templates
/// (the chart model holds only the chart's own), reporting links it skips in `warnings`.
pub(super) fn elsewhere(
    chart: &Chart,
    kind: &str,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<anyhow::Error> {
    let templates = &chart.paths.templates;
    let mut packaged = Vec::new();
    for dep in chart::dependencies(&chart.dir) {
        match dep {
            chart::Dependency::Chart { dir, name } => {
                let files = chart::dependency_templates(&chart.dir, &dir, warnings)?;
                if let Some(d) = target_docs(files.iter(), kind).first() {
                    let sub = chart::dependency_name(&dir).unwrap_or(name);
                    return Ok(anyhow::anyhow!(
                        "no template under '{}' renders a {kind}: the dependency `{sub}` does ({}:{}). chartgen adds the ScaledObject to the chart that renders the {kind}, so both render under the same conditions: run `chartgen app --chart {}` (on that chart's own source if it is vendored here), then turn it on from this chart with `{sub}.autoscaling.enabled: true` in values.yaml (under the dependency's alias, if it has one)",
                        templates.display(),
                        d.path.display(),
                        d.line + 1,
                        dir.display()
                    ));
                }
            }
            chart::Dependency::Packaged(name) => packaged.push(name),
        }
    }
    let deps = chart.dir.join("charts");
    Ok(if packaged.is_empty() {
        anyhow::anyhow!(
            "no template under '{}' renders a {kind} (no `kind: {kind}` line); run chartgen app on the chart that renders the {kind}, or pass --target-kind with the kind whose replica field this chart renders from values",
            templates.display()
        )
    } else {
        anyhow::anyhow!(
            "no template under '{}' renders a {kind}; the packaged dependencies in '{}' ({}) may. chartgen does not edit a packaged chart: run chartgen app on the source of the dependency that renders the {kind} and package it again (or unpack it into charts/<name>/ and run `chartgen app --chart` on that directory), then turn it on from this chart with `<name>.autoscaling.enabled: true` in values.yaml",
            templates.display(),
            deps.display(),
            names::echo_list(&packaged)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::engine;

    #[test]
    fn the_redis_count_is_the_line_under_spec_redis_only() {
        let text = "kind: RedisFailover\nspec:\n  sentinel:\n    replicas: {{ .Values.s }}\n  redis:\n    {{- if .Values.size }}\n    storage: {}\n    {{- end }}\n    replicas: {{ .Values.replicas }}\n---\nkind: Other\nspec:\n  redis:\n    replicas: {{ .Values.replicas }}\n";
        let lines: Vec<&str> = text.lines().collect();
        let shape = Shape {
            field: "replicas",
            kind: "RedisFailover",
            parents: engine::REDIS.parents(),
        };
        let held: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("replicas:") && shape.holds(text, &lines, i))
            .collect();
        assert_eq!(held, [8], "not the sentinels' (3), not another kind's (13)");
        let anywhere = Shape {
            parents: &[],
            ..shape
        };
        assert!(
            anywhere.holds(text, &lines, 3),
            "CNPG's shape: any line of the kind"
        );
    }
}
