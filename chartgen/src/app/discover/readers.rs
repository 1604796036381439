//! Other template lines that read the count's values key: they stay static while KEDA moves the
//! target, so each becomes a note naming what renders it.

use super::Found;
use crate::app::AppSpec;
use crate::app::chart::{Chart, Template};
use crate::app::target;

/// Every other template line that reads the count value: it stays static while KEDA moves the
/// target, which the author should know about.
pub(super) fn other_readers(chart: &Chart, spec: &AppSpec, found: &[Found]) -> Vec<String> {
    let needle = format!(".Values.{}", spec.values_key);
    let mut out = Vec::new();
    for Template { path, text, .. } in chart.sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let reads = line.match_indices(&needle).any(|(at, _)| {
                !line[at + needle.len()..]
                    .starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
            });
            let is_replica_line = found.iter().any(|f| f.path == path && f.line == i);
            if !reads || is_replica_line || line.contains(".autoscaling.") {
                continue;
            }
            let kind = reader(chart, text, &lines, i);
            out.push(format!(
                "{}:{} ({kind}) also reads .Values.{}: `{}`; it stays at that value while KEDA moves the {}",
                path.display(),
                i + 1,
                spec.values_key,
                line.trim(),
                spec.target_kind
            ));
        }
    }
    out
}

/// What renders 0-based line `i` of a template: its document's kind; for a line in a helper,
/// the helper and the kinds and files of the documents that include it.
fn reader(chart: &Chart, text: &str, lines: &[&str], i: usize) -> String {
    if let Some(kind) = target::doc_at(text, lines, i).top("kind") {
        return kind.trim_matches(['"', '\'']).to_owned();
    }
    let Some(helper) = target::define_at(text, i) else {
        return "a document with no `kind:` line".into();
    };
    let calls = [
        format!("include \"{helper}\""),
        format!("template \"{helper}\""),
    ];
    let mut users = Vec::new();
    for Template {
        path, text: other, ..
    } in &chart.templates
    {
        let other_lines: Vec<&str> = other.lines().collect();
        for (j, line) in other_lines.iter().enumerate() {
            if calls.iter().any(|c| line.contains(c.as_str())) {
                let kind = target::doc_at(other, &other_lines, j)
                    .top("kind")
                    .map_or_else(|| "a helper".to_owned(), str::to_owned);
                users.push(format!("{kind} at {}:{}", path.display(), j + 1));
            }
        }
    }
    if users.is_empty() {
        format!("helper `{helper}`, which no template includes")
    } else {
        format!("helper `{helper}`, rendered into {}", users.join(", "))
    }
}
