//! The `autoscaling:` block of values.yaml: defaults merged with what the author already set,
//! spliced into the file as text so every other line stays exactly as written.

use serde_json::{Value, json};

use super::engine::Engine;

/// Top-level key of the block.
pub const KEY: &str = "autoscaling";

/// Defaults in the order the block lists them (docs/chartgen.md: the scaler address and its mTLS
/// credentials, the decision's inputs, the controls, the HPA tolerance and behaviour). Redis
/// brakes on a byte offset lag (docs/redis.md), CNPG on seconds.
pub fn defaults(engine: Engine, scaler_address: &str) -> Vec<(&'static str, Value)> {
    let lag = match engine {
        Engine::Cnpg => ("maxReplicationLagSeconds", json!(0)),
        // Redis's own default repl-backlog-size: above a second of most masters' writes.
        Engine::Redis => ("maxReplicationLagBytes", json!(1_048_576)),
    };
    vec![
        ("enabled", json!(false)),
        ("scalerAddress", json!(scaler_address)),
        (
            "clusterTriggerAuthentication",
            json!(crate::package::TRIGGER_AUTHENTICATION),
        ),
        ("minReplicas", json!(2)),
        ("maxReplicas", json!(6)),
        ("metric", json!("ReadConnections")),
        ("target", json!(150)),
        ("signals", json!([])),
        lag,
        ("dryRun", json!(false)),
        ("scaleIn", json!("enabled")),
        ("schedules", json!([])),
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
        "values.yaml: `autoscaling.{0}` must be a mapping of settings, found {1}; remove it or make it a mapping"
    )]
    NestedNotMapping(&'static str, String),
}

/// Parses values.yaml after bounding its size and nesting depth, so a hostile file costs
/// linear time; a syntax error names its line.
pub fn parse(values_text: &str) -> Result<serde_json::Map<String, Value>, ValuesError> {
    if values_text.len() > MAX_BYTES {
        return Err(ValuesError::TooLarge);
    }
    if let Some(line) = deeper_than(values_text, MAX_DEPTH) {
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
pub fn deeper_than(text: &str, limit: usize) -> Option<usize> {
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

/// The block's settings in the defaults' order: the author's value where set, else the default.
pub fn merge(
    root: &serde_json::Map<String, Value>,
    defaults: Vec<(&'static str, Value)>,
) -> Result<serde_json::Map<String, Value>, ValuesError> {
    let mut have = match root.get(KEY) {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(ValuesError::BlockNotMapping(other.to_string())),
    };
    let mut known = serde_json::Map::new();
    for (k, default) in defaults {
        let value = match (have.remove(k), default) {
            // A nested block of settings (`pooler`): the author's keys, the rest defaulted.
            (Some(Value::Object(mut set)), Value::Object(all)) if NESTED.contains(&k) => {
                for (key, d) in all {
                    set.entry(key).or_insert(d);
                }
                Value::Object(set)
            }
            (Some(other), _) if NESTED.contains(&k) && !other.is_null() => {
                return Err(ValuesError::NestedNotMapping(k, other.to_string()));
            }
            (Some(set), _) if !NESTED.contains(&k) => set,
            (_, default) => default,
        };
        known.insert(k.to_owned(), value);
    }
    Ok(known)
}

/// Keys of the block that hold settings of their own (pooler.rs), merged key by key.
const NESTED: &[&str] = &["pooler"];

/// True when the dotted `path` exists in values.yaml.
pub fn has_path(root: &serde_json::Map<String, Value>, path: &str) -> bool {
    let mut segs = path.split('.');
    let Some(first) = segs.next().and_then(|s| root.get(s)) else {
        return false;
    };
    segs.try_fold(first, |v, seg| v.get(seg)).is_some()
}

/// How the chart documents its values, so the block is written the same way and the chart's
/// own README/schema generator keeps it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Convention {
    /// helm-docs `# -- description` (also the default for an undocumented file).
    #[serde(rename = "helm-docs")]
    HelmDocs,
    /// Bitnami readme-generator `## @param key description`.
    #[serde(rename = "bitnami")]
    Bitnami,
    /// cozyvalues-gen `## @param {type} key - description` with `@typedef`/`@field`.
    #[serde(rename = "cozy")]
    Cozy,
}

pub fn convention(text: &str) -> Convention {
    let params = || {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix("## @param "))
    };
    if params().any(|r| r.starts_with('{')) {
        Convention::Cozy
    } else if params().next().is_some() {
        Convention::Bitnami
    } else {
        Convention::HelmDocs
    }
}

/// What `merge_block` did, for the report.
#[derive(Debug, Default, PartialEq)]
pub struct BlockChange {
    /// Keys added to an existing block.
    pub added: Vec<String>,
    /// Retired keys removed.
    pub removed: Vec<String>,
}

/// Writes `rendered` (the full block, possibly preceded by convention lines) into `text`:
/// appended when the file has no `key:` block; otherwise the existing block is kept line for line
/// (comments, order and values included), retired keys are dropped and missing keys are added
/// from `rendered` at its end.
pub fn merge_block(text: &str, key: &str, rendered: &str) -> (String, BlockChange) {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let Some((start, end)) = block_span(&lines, key) else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(rendered);
        return (out, BlockChange::default());
    };
    let rendered_lines: Vec<&str> = rendered.split_inclusive('\n').collect();
    let own = block_span(&rendered_lines, key).map_or(0, |(s, _)| s);
    let fresh = entries(&rendered_lines[own + 1..]);
    let head = lines[start].trim_end();
    let flow_or_empty =
        head.len() > key.len() + 1 && !head[key.len() + 1..].trim_start().starts_with('#');
    let existing = entries(&lines[start + 1..end]);
    let mut change = BlockChange::default();
    let mut body = String::new();
    if flow_or_empty {
        // `autoscaling: {}` or a flow mapping: nothing to keep line by line.
        body.push_str(&rendered_lines[own..].concat());
    } else {
        body.push_str(lines[start]);
        for (k, chunk) in &existing {
            match k {
                Some(k) if RETIRED.contains(&k.as_str()) => change.removed.push(k.clone()),
                _ => body.push_str(chunk),
            }
        }
        if !body.ends_with('\n') {
            body.push('\n');
        }
        let indent = existing
            .iter()
            .find_map(|(k, c)| k.as_ref().map(|_| key_indent(c)))
            .unwrap_or(2);
        for (k, chunk) in &fresh {
            let Some(k) = k else { continue };
            if existing.iter().any(|(e, _)| e.as_ref() == Some(k)) {
                continue;
            }
            change.added.push(k.clone());
            body.push_str(&reindent(chunk, indent));
        }
    }
    let mut out: String = lines[..start].concat();
    out.push_str(&body);
    if end == lines.len() && !text.ends_with('\n') {
        out.pop();
    }
    out.push_str(&lines[end..].concat());
    (out, change)
}

/// Lines `[start, end)` of the top-level `key:` block: the key line and every indented, list or
/// comment line up to its last content line.
fn block_span(lines: &[&str], key: &str) -> Option<(usize, usize)> {
    let is_key_line = |l: &str| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\n', '\r', '\t', '#']))
    };
    let start = lines.iter().position(|l| is_key_line(l))?;
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
    Some((start, end))
}

/// Splits a block body into entries: each is the comment lines above a key, the key line and
/// everything nested under it. Lines before the first key form an entry without a key.
fn entries(lines: &[&str]) -> Vec<(Option<String>, String)> {
    let child = lines
        .iter()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| l.len() - l.trim_start().len());
    let mut out: Vec<(Option<String>, String)> = Vec::new();
    let mut pending = String::new();
    for line in lines {
        let body = line.trim_start();
        let ind = line.len() - body.len();
        let is_key = Some(ind) == child
            && !body.starts_with('#')
            && !body.starts_with('-')
            && body.contains(':');
        if is_key {
            let k = body
                .split(':')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches(['"', '\''])
                .to_owned();
            out.push((Some(k), std::mem::take(&mut pending) + line));
        } else if body.starts_with('#') && Some(ind) <= child {
            pending.push_str(line);
        } else if let Some(last) = out.last_mut() {
            last.1.push_str(&std::mem::take(&mut pending));
            last.1.push_str(line);
        } else {
            pending.push_str(line);
        }
    }
    if !pending.is_empty() {
        match out.last_mut() {
            Some(last) => last.1.push_str(&pending),
            None => out.push((None, pending)),
        }
    }
    out
}

fn key_indent(chunk: &str) -> usize {
    chunk
        .lines()
        .find(|l| !l.trim_start().starts_with('#'))
        .map_or(2, |l| l.len() - l.trim_start().len())
}

/// Re-indents a rendered entry (two spaces per level) to `indent` spaces per level.
fn reindent(chunk: &str, indent: usize) -> String {
    if indent == 2 {
        return chunk.to_owned();
    }
    chunk
        .split_inclusive('\n')
        .map(|l| {
            let n = l.len() - l.trim_start_matches(' ').len();
            format!("{}{}", " ".repeat(n / 2 * indent + n % 2), &l[n..])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "## @section Autoscaling\nautoscaling:\n  # -- on\n  enabled: false\n  # -- how far\n  target: 150\n";

    #[test]
    fn appends_when_absent_and_keeps_everything_else() {
        let src = "# top\nreplicas: 2  # two\nquorum:\n  maxSyncReplicas: 0\n";
        let (out, change) = merge_block(src, KEY, BLOCK);
        assert_eq!(out, format!("{src}\n{BLOCK}"));
        assert_eq!(change, BlockChange::default());
    }

    #[test]
    fn an_existing_block_keeps_its_lines_and_gains_missing_keys() {
        let src = "a: 1\nautoscaling:\n    enabled: true   # prod\n    # why 9\n    replicaMode: seed\n    custom:\n      - x\n\n# about b\nb:\n  - 1\n";
        let (out, change) = merge_block(src, KEY, BLOCK);
        assert_eq!(
            out,
            "a: 1\nautoscaling:\n    enabled: true   # prod\n    custom:\n      - x\n    # -- how far\n    target: 150\n\n# about b\nb:\n  - 1\n"
        );
        assert_eq!(change.added, ["target"]);
        assert_eq!(change.removed, ["replicaMode"]);
        assert_eq!(merge_block(&out, KEY, BLOCK).0, out, "idempotent");
    }

    #[test]
    fn an_empty_block_is_filled_and_similar_keys_are_not_the_block() {
        let (out, _) = merge_block("autoscaling: {}\nz: 1", KEY, BLOCK);
        assert_eq!(
            out,
            "autoscaling:\n  # -- on\n  enabled: false\n  # -- how far\n  target: 150\nz: 1"
        );
        let src = "autoscalingX: 1\n";
        assert!(
            merge_block(src, KEY, BLOCK)
                .0
                .starts_with("autoscalingX: 1\n\n## @section")
        );
    }

    #[test]
    fn conventions_are_detected() {
        assert_eq!(
            convention("## @param {int} replicas - n\n"),
            Convention::Cozy
        );
        assert_eq!(convention("## @param replicas n\n"), Convention::Bitnami);
        assert_eq!(convention("# -- n\nreplicas: 1\n"), Convention::HelmDocs);
    }

    #[test]
    fn merge_keeps_author_values() {
        let root = parse("replicas: 3\nautoscaling:\n  enabled: true\n  target: 40\n  custom: x\n")
            .unwrap();
        let m = merge(&root, defaults(Engine::Cnpg, "s:1")).unwrap();
        assert_eq!(m["enabled"], json!(true));
        assert_eq!(m["target"], json!(40));
        assert_eq!(m["maxReplicas"], json!(6));
        assert_eq!(m["scalerAddress"], json!("s:1"));
        assert!(!m.contains_key("custom"), "kept in the text, not rendered");
        let keys: Vec<&String> = m.keys().collect();
        assert_eq!(keys[0], "enabled");
        assert_eq!(keys[14], "behavior");
    }

    #[test]
    fn merge_rejects_a_scalar_block() {
        assert!(matches!(
            merge(
                &parse("autoscaling: true\n").unwrap(),
                defaults(Engine::Cnpg, "s")
            ),
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

    /// Fuzz properties of the values reader (every chart author's values.yaml goes through it).
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// Scalars, lists and maps up to four levels, as values.yaml holds them.
        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                "[ -~]{0,12}".prop_map(Value::from),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                    prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_.-]{0,8}", inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// Any text: an answer or a named error, never a panic, and fast.
            #[test]
            fn any_text_is_parsed_or_refused_quickly(text in "[ -~\n\t]{0,2048}") {
                let started = std::time::Instant::now();
                let _ = parse(&text);
                prop_assert!(started.elapsed() < std::time::Duration::from_secs(1));
            }

            /// Bracket and indentation soup: the depth bound answers before the YAML parser runs.
            #[test]
            fn nesting_soup_is_bounded(text in "([\\[\\]{}:,\n-]| {1,3}|k|\"){0,2048}") {
                let started = std::time::Instant::now();
                let _ = parse(&text);
                prop_assert!(started.elapsed() < std::time::Duration::from_secs(1));
            }

            /// A mapping written as YAML reads back as the same values.
            #[test]
            fn written_values_read_back(root in prop::collection::btree_map("[a-z][a-z0-9]{0,8}", value(), 0..8)) {
                let root: serde_json::Map<String, Value> = root.into_iter().collect();
                let text = serde_norway::to_string(&root).unwrap();
                prop_assert_eq!(parse(&text).unwrap(), root);
            }
        }
    }
}
