//! The `autoscaling:` block of values.yaml: defaults merged with what the author already set,
//! spliced into the file as text so every other line stays exactly as written.

use serde_json::{Value, json};

/// Top-level key of the block.
pub const KEY: &str = "autoscaling";

/// Defaults in the order the block lists them (cozystack-designs.md §1.5, plus the scaler
/// address, the HPA tolerance and the HPA behaviour).
pub fn defaults(scaler_address: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("enabled", json!(false)),
        ("scalerAddress", json!(scaler_address)),
        ("minReplicas", json!(2)),
        ("maxReplicas", json!(6)),
        ("metric", json!("ReadConnections")),
        ("target", json!(150)),
        ("maxReplicationLagSeconds", json!(0)),
        ("dryRun", json!(false)),
        ("transition", json!(false)),
        ("tolerance", json!(0)),
        (
            "behavior",
            json!({
                "scaleUp": {"stabilizationWindowSeconds": 300},
                "scaleDown": {
                    "stabilizationWindowSeconds": 1800,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}],
                },
            }),
        ),
    ]
}

/// Keys earlier chartgen versions generated and that mean nothing now; a re-run drops them
/// (`replicaMode`: the omit and seed modes were replaced by the live count, docs/chartgen.md).
const RETIRED: &[&str] = &["replicaMode"];

/// Deepest nesting accepted in values.yaml: real charts stay under ten levels, and the YAML
/// parser's time grows steeply with depth (100k levels took minutes).
pub const MAX_DEPTH: usize = 64;
/// Largest values.yaml accepted.
pub const MAX_BYTES: usize = 8 << 20;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ValuesError {
    #[error("values.yaml is not valid YAML: {0}; fix it before running chartgen app")]
    Parse(String),
    #[error(
        "values.yaml nests deeper than {MAX_DEPTH} levels (line {0}); chartgen refuses it to stay fast: flatten that value"
    )]
    TooDeep(usize),
    #[error("values.yaml is larger than {} MiB; chartgen refuses it", MAX_BYTES >> 20)]
    TooLarge,
    #[error("values.yaml: top level must be a mapping")]
    NotMapping,
    #[error(
        "values.yaml: `autoscaling` must be a mapping of settings, found {0}; remove it or make it a mapping"
    )]
    BlockNotMapping(String),
    #[error(
        "values.yaml has no `{0}`; the chart must render its replica field from it (or pass the right --values-key)"
    )]
    MissingKey(String),
}

/// Known keys (author's value, else default) and the author's extra keys, both in order.
#[derive(Debug, PartialEq)]
pub struct Merged {
    pub known: serde_json::Map<String, Value>,
    pub extra: serde_json::Map<String, Value>,
}

/// Parses values.yaml after bounding its size and nesting depth, so a hostile file costs
/// linear time; a syntax error names its line.
pub fn parse(values_text: &str) -> Result<serde_json::Map<String, Value>, ValuesError> {
    if values_text.len() > MAX_BYTES {
        return Err(ValuesError::TooLarge);
    }
    if let Some(line) = too_deep(values_text, MAX_DEPTH) {
        return Err(ValuesError::TooDeep(line));
    }
    if values_text.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_norway::from_str(values_text).map_err(|e| ValuesError::Parse(e.to_string()))? {
        Value::Null => Ok(serde_json::Map::new()),
        Value::Object(m) => Ok(m),
        _ => Err(ValuesError::NotMapping),
    }
}

/// The first line where the nesting (block indentation levels, `- ` entries and flow brackets)
/// exceeds `limit`. A linear over-estimate: block scalars are skipped, quotes are honoured.
fn too_deep(text: &str, limit: usize) -> Option<usize> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut block_scalar: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = line[indent..].trim_end();
        if let Some(owner) = block_scalar {
            if body.is_empty() || indent > owner {
                continue;
            }
            block_scalar = None;
        }
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let mut dashes = 0;
        let mut rest = body;
        while let Some(r) = rest
            .strip_prefix("- ")
            .or(if rest == "-" { Some("") } else { None })
        {
            dashes += 1;
            rest = r.trim_start();
        }
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        let mut peak = flow;
        for c in rest.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '"' | '\'' if " :-[{,".contains(prev) => quote = Some(c),
                    '#' if prev == ' ' => break,
                    '[' | '{' => {
                        flow += 1;
                        peak = peak.max(flow);
                    }
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = c;
        }
        if indents.len() + dashes + peak > limit {
            return Some(n + 1);
        }
        let scalar_head = rest.rsplit([' ', ':']).next().unwrap_or("");
        if flow == 0 && (scalar_head.starts_with('|') || scalar_head.starts_with('>')) {
            block_scalar = Some(indent);
        }
    }
    None
}

/// Merges the author's existing `autoscaling` settings over the defaults.
pub fn merge(
    root: &serde_json::Map<String, Value>,
    defaults: Vec<(&'static str, Value)>,
) -> Result<Merged, ValuesError> {
    let mut have = match root.get(KEY) {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(ValuesError::BlockNotMapping(other.to_string())),
    };
    for key in RETIRED {
        have.remove(*key);
    }
    let mut known = serde_json::Map::new();
    for (k, default) in defaults {
        known.insert(k.to_owned(), have.remove(k).unwrap_or(default));
    }
    Ok(Merged { known, extra: have })
}

/// True when the dotted `path` exists in values.yaml.
pub fn has_path(root: &serde_json::Map<String, Value>, path: &str) -> bool {
    let mut segs = path.split('.');
    let Some(first) = segs.next().and_then(|s| root.get(s)) else {
        return false;
    };
    segs.try_fold(first, |v, seg| v.get(seg)).is_some()
}

/// Replaces the top-level `key:` block (the key line and every indented, list or comment line
/// up to its last content line) with `block`, or appends `block` when the key is absent.
pub fn splice(text: &str, key: &str, block: &str) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let is_key_line = |l: &str| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\n', '\r', '\t', '#']))
    };
    let Some(start) = lines.iter().position(|l| is_key_line(l)) else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(block);
        return out;
    };
    let mut end = start + 1;
    for (i, l) in lines.iter().enumerate().skip(start + 1) {
        let content = !l.trim().is_empty() && !l.starts_with('#');
        if content && !l.starts_with([' ', '\t', '-']) {
            break;
        }
        if content {
            end = i + 1;
        }
    }
    let mut out: String = lines[..start].concat();
    out.push_str(block);
    if end == lines.len() && !text.ends_with('\n') {
        // Keep the file's (missing) final newline as it was.
        out.pop();
    }
    out.push_str(&lines[end..].concat());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "autoscaling:\n  enabled: false\n";

    #[test]
    fn appends_when_absent_and_keeps_everything_else() {
        let src = "# top\nreplicas: 2  # two\nquorum:\n  maxSyncReplicas: 0\n";
        let out = splice(src, KEY, BLOCK);
        assert_eq!(out, format!("{src}\n{BLOCK}"));
    }

    #[test]
    fn replaces_only_the_block_in_the_middle() {
        let src =
            "a: 1\nautoscaling:\n  enabled: true\n  # note\n  target: 9\n\n# about b\nb:\n  - 1\n";
        let out = splice(src, KEY, BLOCK);
        assert_eq!(
            out,
            "a: 1\nautoscaling:\n  enabled: false\n\n# about b\nb:\n  - 1\n"
        );
    }

    #[test]
    fn splice_is_idempotent() {
        let once = splice("replicas: 2\n", KEY, BLOCK);
        assert_eq!(splice(&once, KEY, BLOCK), once);
    }

    #[test]
    fn similar_keys_are_not_the_block() {
        let src = "autoscalingX: 1\n";
        assert!(splice(src, KEY, BLOCK).starts_with("autoscalingX: 1\n\nautoscaling:"));
    }

    #[test]
    fn merge_keeps_author_values_and_extras() {
        let root = parse("replicas: 3\nautoscaling:\n  enabled: true\n  target: 40\n  custom: x\n")
            .unwrap();
        let m = merge(&root, defaults("s:1")).unwrap();
        assert_eq!(m.known["enabled"], json!(true));
        assert_eq!(m.known["target"], json!(40));
        assert_eq!(m.known["maxReplicas"], json!(6));
        assert_eq!(m.known["scalerAddress"], json!("s:1"));
        assert_eq!(m.extra["custom"], json!("x"));
        let retired = merge(
            &parse("autoscaling:\n  replicaMode: omit\n").unwrap(),
            defaults("s"),
        )
        .unwrap();
        assert!(!retired.extra.contains_key("replicaMode"));
        let keys: Vec<&String> = m.known.keys().collect();
        assert_eq!(keys[0], "enabled");
        assert_eq!(keys[10], "behavior");
    }

    #[test]
    fn merge_rejects_a_scalar_block() {
        assert!(matches!(
            merge(&parse("autoscaling: true\n").unwrap(), defaults("s")),
            Err(ValuesError::BlockNotMapping(_))
        ));
        let root = parse("quorum:\n  maxSyncReplicas: 1\n").unwrap();
        assert!(has_path(&root, "quorum.maxSyncReplicas"));
        assert!(!has_path(
            &parse("quorum: {}\n").unwrap(),
            "quorum.maxSyncReplicas"
        ));
    }

    #[test]
    fn invalid_yaml_names_its_line() {
        let err = parse("replicas: 2\nfoo: [1, 2\nbar: 3\n").unwrap_err();
        assert!(
            matches!(&err, ValuesError::Parse(m) if m.contains("line 3")),
            "{err}"
        );
    }

    #[test]
    fn deep_values_are_refused_fast_and_real_ones_pass() {
        let n = 100_000;
        let flow = format!("replicas: 2\ndeep: {}{}\n", "[".repeat(n), "]".repeat(n));
        let block: String = (0..2000)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        let dashes = format!("x:\n{}1\n", "- ".repeat(n));
        for text in [flow, block, dashes] {
            let started = std::time::Instant::now();
            assert!(matches!(parse(&text), Err(ValuesError::TooDeep(_))));
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
        let ok = "a:\n  b:\n    - c: [1, {d: \"[[[\"}]\n      e: |\n        [[[[ {{{{\n          - - -\n";
        assert!(parse(ok).is_ok());
        let at_limit: String = (0..MAX_DEPTH)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        assert!(parse(&at_limit).is_ok());
        let over: String = (0..=MAX_DEPTH)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        assert_eq!(parse(&over), Err(ValuesError::TooDeep(MAX_DEPTH + 1)));
    }
}
