//! Rewrites `<field>: {{ .Values.<key> }}` into the autoscaling-aware conditional form.
//!
//! The generated block reproduces the original line byte for byte when autoscaling is off
//! (the `{{-` markers only eat the newlines the block itself adds), so an off chart renders
//! exactly as before. An existing block is recognised by its first line and regenerated from
//! the original line it carries, which makes the rewrite idempotent.

#[derive(Debug, Clone)]
pub struct ReplicaLine<'a> {
    /// Field name in the manifest, e.g. `instances`.
    pub field: &'a str,
    /// Values path the field renders from, e.g. `replicas`.
    pub key: &'a str,
    /// Helper prefix (the chart name).
    pub chart: &'a str,
}

/// The expression of `<indent><field>: {{ <expr> }}`.
pub fn count_expr<'a>(field: &str, line: &'a str) -> Option<&'a str> {
    let rest = line.trim_start().strip_prefix(field)?.strip_prefix(':')?;
    Some(rest.trim().strip_prefix("{{ ")?.strip_suffix(" }}")?.trim())
}

/// The values path of `<indent><field>: {{ .Values.<path> ... }}` (or `$.Values.`).
pub fn values_path<'a>(field: &str, line: &'a str) -> Option<&'a str> {
    let expr = count_expr(field, line)?;
    let path = expr
        .strip_prefix(".Values.")
        .or_else(|| expr.strip_prefix("$.Values."))?;
    let end = path
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(path.len());
    let path = &path[..end];
    (!path.is_empty() && !path.ends_with('.')).then_some(path)
}

#[derive(Debug, PartialEq)]
pub struct Rewrite {
    pub text: String,
    /// Replica lines found (raw or already rewritten).
    pub found: usize,
    /// 0-based line numbers, in the input text, of the original replica lines.
    pub lines: Vec<usize>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error(
    "line {line}: the chartgen replica block is damaged (expected `{expected}`); restore the original `{field}: {{{{ .Values.{key} }}}}` line and re-run chartgen app"
)]
pub struct Damaged {
    pub line: usize,
    pub expected: String,
    pub field: String,
    pub key: String,
}

impl ReplicaLine<'_> {
    fn head(&self) -> String {
        format!(
            "{{{{- if eq (include \"{}.autoscaling.replicaField\" $) \"static\" }}}}",
            self.chart
        )
    }

    fn block(&self, original: &str) -> String {
        let indent: String = original.chars().take_while(|c| c.is_whitespace()).collect();
        let c = self.chart;
        format!(
            "{head}\n{original}\n{{{{- else }}}}\n\
             {indent}{field}: {{{{ include \"{c}.autoscaling.instances\" $ }}}}\n{{{{- end }}}}\n",
            head = self.head(),
            field = self.field,
        )
    }

    /// True for `<indent><field>: {{ .Values.<key> ... }}`.
    pub fn is_raw(&self, line: &str) -> bool {
        values_path(self.field, line) == Some(self.key)
    }

    /// Rewrites the replica lines for which `target(line)` holds (0-based, in `text`); the
    /// others (a Pooler reading the same value) stay as they are.
    pub fn rewrite(&self, text: &str, target: &dyn Fn(usize) -> bool) -> Result<Rewrite, Damaged> {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let head = self.head();
        let mut out = String::with_capacity(text.len() + 256);
        let mut found = 0;
        let mut at = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim_end_matches(['\n', '\r']);
            if line == head && target(i + 1) {
                let original = lines
                    .get(i + 1)
                    .map(|l| l.trim_end_matches(['\n', '\r']))
                    .unwrap_or("");
                let block = self.block(original);
                let existing: String = lines[i..(i + 5).min(lines.len())].concat();
                if !self.is_raw(original) || !block_shape(&existing) {
                    return Err(Damaged {
                        line: i + 2,
                        expected: format!("{}: {{{{ .Values.{} }}}}", self.field, self.key),
                        field: self.field.into(),
                        key: self.key.into(),
                    });
                }
                out.push_str(&block);
                found += 1;
                at.push(i + 1);
                i += 5;
            } else if self.is_raw(line) && target(i) {
                out.push_str(&self.block(line));
                found += 1;
                at.push(i);
                i += 1;
            } else {
                out.push_str(lines[i]);
                i += 1;
                continue;
            }
            // The block always ends with a newline; drop it when the source line had none.
            if i >= lines.len() && !text.ends_with('\n') {
                out.pop();
            }
        }
        Ok(Rewrite {
            text: out,
            found,
            lines: at,
        })
    }
}

/// A generated block, possibly from an older chartgen: five lines ending in `{{- end }}`.
fn block_shape(existing: &str) -> bool {
    existing.lines().count() == 5
        && existing
            .lines()
            .last()
            .is_some_and(|l| l.trim() == "{{- end }}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RL: ReplicaLine = ReplicaLine {
        field: "instances",
        key: "replicas",
        chart: "pg",
    };

    #[test]
    fn wraps_the_raw_line_and_keeps_the_rest() {
        let src = "spec:\n  instances: {{ .Values.replicas }}\n  imageName: x\n";
        let r = RL.rewrite(src, &|_| true).unwrap();
        assert_eq!(r.found, 1);
        assert_eq!(
            r.text,
            "spec:\n{{- if eq (include \"pg.autoscaling.replicaField\" $) \"static\" }}\n  instances: {{ .Values.replicas }}\n\
             {{- else }}\n  instances: {{ include \"pg.autoscaling.instances\" $ }}\n\
             {{- end }}\n  imageName: x\n"
        );
    }

    #[test]
    fn rewrite_is_idempotent() {
        let src = "spec:\n  instances: {{ .Values.replicas }}\n  imageName: x";
        let once = RL.rewrite(src, &|_| true).unwrap();
        let twice = RL.rewrite(&once.text, &|_| true).unwrap();
        assert_eq!((&once.text, once.found), (&twice.text, twice.found));
        assert!(
            !once.text.ends_with('\n'),
            "a missing final newline stays missing"
        );
        assert_eq!(
            (once.lines, twice.lines),
            (vec![1], vec![2]),
            "the original line, then inside the block"
        );
    }

    #[test]
    fn other_keys_and_forms_are_left_alone() {
        for line in [
            "  instances: {{ .Values.replicasMax }}",
            "  instances: 3",
            "  instances: {{- .Values.replicas }}",
            "  minSyncReplicas: {{ .Values.replicas }}",
        ] {
            assert!(!RL.is_raw(line), "{line}");
        }
        assert!(RL.is_raw("    instances: {{ .Values.replicas | int }}"));
        assert!(
            RL.is_raw("  instances: {{ $.Values.replicas }}"),
            "inside with/range"
        );
        assert_eq!(RL.rewrite("a: 1\n", &|_| true).unwrap().found, 0);
    }

    #[test]
    fn lines_outside_the_target_stay_as_they_are() {
        let src = "kind: Cluster\n  instances: {{ .Values.replicas }}\n---\nkind: Pooler\n  instances: {{ .Values.replicas }}\n";
        let r = RL.rewrite(src, &|i| i < 2).unwrap();
        assert_eq!((r.found, r.lines), (1, vec![1]));
        assert!(
            r.text
                .ends_with("kind: Pooler\n  instances: {{ .Values.replicas }}\n")
        );
        assert_eq!(RL.rewrite(&r.text, &|i| i < 6).unwrap().text, r.text);
        assert_eq!(
            count_expr("instances", "  instances: {{ .Values.n | default 3 }}"),
            Some(".Values.n | default 3")
        );
    }

    #[test]
    fn damaged_block_is_reported_with_its_line() {
        let src = "spec:\n{{- if eq (include \"pg.autoscaling.replicaField\" $) \"static\" }}\n  instances: 3\n";
        let err = RL.rewrite(src, &|_| true).unwrap_err();
        assert_eq!(err.line, 3);
    }
}
