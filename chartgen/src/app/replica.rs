//! Rewrites a count line (`<field>: {{ .Values.<key> }}`, see `target::count_at`) into the
//! autoscaling-aware conditional form.
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
    /// The target's helpers under the chart's: `autoscaling` (the chart's one target) or
    /// `autoscaling.pooler` (a CNPG Pooler, pooler.rs).
    pub helpers: &'a str,
}

/// A count line to rewrite: the byte range of its count expression, and the argument its
/// autoscaling branch passes to the `instances` helper (`$`, or which Pooler: `(list $ 0)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    pub span: (usize, usize),
    pub arg: String,
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
            "{{{{- if eq (include \"{}.{}.replicaField\" $) \"static\" }}}}",
            self.chart, self.helpers
        )
    }

    /// The original line, and in the autoscaling branch the same line with the expression at
    /// `span` reading the count helper instead (a comment or the chart's own check stays).
    fn block(&self, original: &str, counted: &Counted) -> String {
        let (from, to) = counted.span;
        format!(
            "{head}\n{original}\n{{{{- else }}}}\n{}include \"{}.{}.instances\" {}{}\n{{{{- end }}}}\n",
            &original[..from],
            self.chart,
            self.helpers,
            counted.arg,
            &original[to..],
            head = self.head(),
        )
    }

    /// Rewrites the count lines: `count_at(i)` gives the count expression of 0-based line `i`
    /// of `text` when it is one of the target's (another object reading the same value is not,
    /// and stays as it is).
    pub fn rewrite(
        &self,
        text: &str,
        count_at: &dyn Fn(usize) -> Option<Counted>,
    ) -> Result<Rewrite, Damaged> {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let head = self.head();
        let mut out = String::with_capacity(text.len() + 256);
        let mut found = 0;
        let mut at = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim_end_matches(['\n', '\r']);
            if line == head {
                let original = lines
                    .get(i + 1)
                    .map(|l| l.trim_end_matches(['\n', '\r']))
                    .unwrap_or("");
                let existing: String = lines[i..(i + 5).min(lines.len())].concat();
                let span = count_at(i + 1).filter(|_| block_shape(&existing));
                let Some(span) = span else {
                    return Err(Damaged {
                        line: i + 2,
                        expected: format!("{}: {{{{ .Values.{} }}}}", self.field, self.key),
                        field: self.field.into(),
                        key: self.key.into(),
                    });
                };
                out.push_str(&self.block(original, &span));
                found += 1;
                at.push(i + 1);
                i += 5;
            } else if let Some(span) = count_at(i) {
                out.push_str(&self.block(line, &span));
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
    use super::super::target::{Count, count_at};
    use super::*;

    const RL: ReplicaLine = ReplicaLine {
        field: "instances",
        key: "replicas",
        chart: "pg",
        helpers: "autoscaling",
    };

    /// The count spans of `src` reading `.Values.replicas` on lines `lines` accepts.
    fn spans(src: &str, lines: impl Fn(usize) -> bool) -> impl Fn(usize) -> Option<Counted> {
        let text: Vec<&str> = src.lines().collect();
        move |i| match count_at(src, &text, i, "instances") {
            Some(Count::Values { key, span, .. }) if key == "replicas" && lines(i) => {
                Some(Counted {
                    span,
                    arg: "$".into(),
                })
            }
            _ => None,
        }
    }

    fn rewrite(src: &str) -> Rewrite {
        RL.rewrite(src, &spans(src, |_| true)).unwrap()
    }

    #[test]
    fn wraps_the_raw_line_and_keeps_the_rest() {
        let src = "spec:\n  instances: {{ .Values.replicas }}\n  imageName: x\n";
        let r = rewrite(src);
        assert_eq!(r.found, 1);
        assert_eq!(
            r.text,
            "spec:\n{{- if eq (include \"pg.autoscaling.replicaField\" $) \"static\" }}\n  instances: {{ .Values.replicas }}\n\
             {{- else }}\n  instances: {{ include \"pg.autoscaling.instances\" $ }}\n\
             {{- end }}\n  imageName: x\n"
        );
    }

    #[test]
    fn the_autoscaling_branch_keeps_the_comment_and_the_charts_own_check() {
        let src = "  instances: {{ .Values.replicas }} # odd\n  instances: {{ if lt (int .Values.replicas) 3 }}{{ fail \"3+\" }}{{ else }}{{- .Values.replicas -}}{{ end }}\n";
        let text = rewrite(src).text;
        assert!(
            text.contains("\n  instances: {{ include \"pg.autoscaling.instances\" $ }} # odd\n"),
            "{text}"
        );
        assert!(text.contains("\n  instances: {{ if lt (int .Values.replicas) 3 }}{{ fail \"3+\" }}{{ else }}{{- include \"pg.autoscaling.instances\" $ -}}{{ end }}\n"), "{text}");
    }

    #[test]
    fn rewrite_is_idempotent() {
        let src = "spec:\n  instances: {{ .Values.replicas }}\n  imageName: x";
        let once = rewrite(src);
        let twice = rewrite(&once.text);
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
            "  minSyncReplicas: {{ .Values.replicas }}",
            "  instances: x{{ .Values.replicas }}",
        ] {
            assert_eq!(rewrite(line).found, 0, "{line}");
        }
        for line in [
            "    instances: {{ .Values.replicas | int }}",
            "  instances: {{ $.Values.replicas }}",
            "  instances: {{ required \"set it\" .Values.replicas }}",
        ] {
            assert_eq!(rewrite(line).found, 1, "{line}");
        }
    }

    #[test]
    fn lines_outside_the_target_stay_as_they_are() {
        let src = "kind: Cluster\n  instances: {{ .Values.replicas }}\n---\nkind: Pooler\n  instances: {{ .Values.replicas }}\n";
        let r = RL.rewrite(src, &spans(src, |i| i < 2)).unwrap();
        assert_eq!((r.found, r.lines), (1, vec![1]));
        assert!(
            r.text
                .ends_with("kind: Pooler\n  instances: {{ .Values.replicas }}\n")
        );
        let again = RL.rewrite(&r.text, &spans(&r.text, |i| i < 6)).unwrap();
        assert_eq!(again.text, r.text);
    }

    #[test]
    fn damaged_block_is_reported_with_its_line() {
        let src = "spec:\n{{- if eq (include \"pg.autoscaling.replicaField\" $) \"static\" }}\n  instances: 3\n";
        let err = RL.rewrite(src, &spans(src, |_| true)).unwrap_err();
        assert_eq!(err.line, 3);
    }
}
