//! Reads what the backtest replays from a ScaledObject as helm or chartgen renders it: the
//! external trigger's metadata, `minReplicaCount`/`maxReplicaCount` and the HPA behaviour.
use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde::Deserialize as _;
use serde_norway::Value;

use names::{echo, echo_list};
use scaler_core::hpa::{Behavior, BehaviorSpec};

/// A rendered chart is a few KiB; refuse to parse anything far larger.
const MAX_FILE_BYTES: u64 = 4 << 20;
/// KEDA's `maxReplicaCount` when the ScaledObject does not set one.
const KEDA_DEFAULT_MAX: u32 = 100;

/// The parts of one ScaledObject the backtest needs.
#[derive(Debug)]
pub struct ScaledObject {
    pub name: String,
    /// `metadata.namespace`, when the file has it (`kubectl get -o yaml` output does).
    pub namespace: Option<String>,
    /// Index of the external trigger in `spec.triggers`.
    pub trigger: usize,
    pub metadata: HashMap<String, String>,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// `None` when the ScaledObject sets none.
    pub behavior: Option<Behavior>,
}

/// Reads the ScaledObject called `name` (or the only one) from a YAML file of one or more
/// documents, e.g. `helm template` output. Errors name the field and the fix.
pub fn read(path: &Path, name: Option<&str>) -> anyhow::Result<ScaledObject> {
    let shown = path.display();
    let text = read_bounded(path).with_context(|| format!("--scaled-object {shown}"))?;
    check_nesting(&text).with_context(|| format!("--scaled-object {shown}"))?;
    let mut found = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(document)
            .with_context(|| format!("--scaled-object {shown}: not YAML"))?;
        // `kubectl get scaledobjects -o yaml` prints one `kind: List` of them.
        match value.get("kind").and_then(Value::as_str) {
            Some("ScaledObject") => found.push(value),
            Some("List") => found.extend(
                value
                    .get("items")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .filter(|v| v.get("kind").and_then(Value::as_str) == Some("ScaledObject"))
                    .cloned(),
            ),
            _ => {}
        }
    }
    let names: Vec<String> = found
        .iter()
        .map(|v| object_name(v).unwrap_or_default().to_owned())
        .collect();
    let index = match name {
        Some(wanted) => names.iter().position(|n| n == wanted).with_context(|| {
            format!(
                "--scaled-object {shown}: no ScaledObject named {}; found: {}",
                echo(wanted),
                echo_list(&names)
            )
        })?,
        None if found.len() == 1 => 0,
        None if found.is_empty() => {
            bail!("--scaled-object {shown}: no document of kind ScaledObject")
        }
        None => bail!(
            "--scaled-object {shown}: {} ScaledObjects ({}); choose one with --name",
            found.len(),
            echo_list(&names)
        ),
    };
    parse(&found[index]).with_context(|| format!("--scaled-object {shown}"))
}

/// The file's text: a regular file (a FIFO would block, a device never end), at most
/// [`MAX_FILE_BYTES`], read with that bound whatever its size claimed.
fn read_bounded(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let regular = |m: &std::fs::Metadata| {
        anyhow::ensure!(
            m.is_file(),
            "not a regular file (a FIFO, a device or a directory): give the rendered YAML file"
        );
        Ok(())
    };
    // Checked before opening (opening a FIFO blocks until a writer comes) and on the opened
    // file (the path may have changed in between).
    regular(&std::fs::metadata(path)?)?;
    let file = std::fs::File::open(path)?;
    regular(&file.metadata()?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_FILE_BYTES,
        "larger than {MAX_FILE_BYTES} bytes; a rendered ScaledObject is a few KiB"
    );
    String::from_utf8(bytes).context("not UTF-8 text")
}

/// Deepest flow nesting (`[`, `{`) and block indentation accepted. A rendered ScaledObject
/// nests about 8 levels, indented under 20 columns; the YAML parser's time grows with the square
/// of the depth (100k brackets: 150 s), so depth is bounded before it runs.
const MAX_FLOW_DEPTH: usize = 64;
const MAX_INDENT_COLUMNS: usize = 256;

/// Refuses text nested deeper than the bounds above, in one linear pass. Brackets are counted
/// outside quotes and comments; a line's depth is its indentation plus its leading `- ` and `? `
/// markers (each opens a level).
fn check_nesting(text: &str) -> anyhow::Result<()> {
    let mut depth = 0usize;
    for (number, line) in text.lines().enumerate() {
        let content = line.trim_start_matches([' ', '-', '?', '\t']);
        let indent = line.len() - content.len();
        anyhow::ensure!(
            indent <= MAX_INDENT_COLUMNS,
            "line {}: nested {indent} columns deep, above {MAX_INDENT_COLUMNS}",
            number + 1
        );
        let (mut quote, mut previous, mut escaped) = (None::<char>, ' ', false);
        for c in content.chars() {
            let after = std::mem::replace(&mut previous, c);
            if std::mem::take(&mut escaped) {
                continue;
            }
            match (quote, c) {
                // YAML comments and quoted scalars only start after a space or an indicator.
                (None, '#') if after.is_whitespace() => break,
                (None, '"') if " \t[{,:".contains(after) => quote = Some(c),
                // `''` inside a single-quoted scalar is a quote: it closes and reopens here.
                (None, '\'') if " \t[{,:'".contains(after) => quote = Some(c),
                (Some('"'), '\\') => escaped = true,
                (Some(q), c) if c == q => quote = None,
                (None, '[' | '{') => {
                    depth += 1;
                    anyhow::ensure!(
                        depth <= MAX_FLOW_DEPTH,
                        "line {}: brackets nested deeper than {MAX_FLOW_DEPTH}",
                        number + 1
                    );
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

fn object_name(object: &Value) -> Option<&str> {
    object.get("metadata")?.get("name")?.as_str()
}

/// One ScaledObject document → its settings.
pub fn parse(object: &Value) -> anyhow::Result<ScaledObject> {
    let name = object_name(object)
        .context("metadata.name: missing; a ScaledObject has a name")?
        .to_owned();
    let spec = object.get("spec").context("spec: missing")?;
    let namespace = object
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(ns) = &namespace {
        anyhow::ensure!(
            names::is_dns_label(ns),
            "metadata.namespace: {} is not a namespace name (a lowercase DNS label)",
            echo(ns)
        );
    }
    let (trigger, metadata) = external_metadata(spec)?;
    let count = |field: &str, default: u32| -> anyhow::Result<u32> {
        match spec.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .with_context(|| format!("spec.{field}: {} is not a whole number >= 0", render(v))),
        }
    };
    let min_replicas = count("minReplicaCount", 0)?;
    let max_replicas = count("maxReplicaCount", KEDA_DEFAULT_MAX)?;
    if min_replicas > max_replicas {
        bail!(
            "spec.minReplicaCount ({min_replicas}) is above spec.maxReplicaCount ({max_replicas})"
        );
    }
    const BEHAVIOR: &str = "spec.advanced.horizontalPodAutoscalerConfig.behavior";
    // Absent: KEDA creates the HPA without behavior, and the controller's fixed rules apply.
    let behavior = match spec
        .get("advanced")
        .and_then(|a| a.get("horizontalPodAutoscalerConfig"))
        .and_then(|h| h.get("behavior"))
    {
        None | Some(Value::Null) => None,
        Some(v) => {
            let written: BehaviorSpec = serde_norway::from_value(v.clone()).context(BEHAVIOR)?;
            Some(
                written.resolve().map_err(|e| {
                    anyhow::anyhow!("spec.advanced.horizontalPodAutoscalerConfig.{e}")
                })?,
            )
        }
    };
    Ok(ScaledObject {
        name,
        namespace,
        trigger,
        metadata,
        min_replicas,
        max_replicas,
        behavior,
    })
}

/// The metadata of the one `external` trigger; KEDA's metadata values are strings only.
fn external_metadata(spec: &Value) -> anyhow::Result<(usize, HashMap<String, String>)> {
    let triggers = spec
        .get("triggers")
        .and_then(Value::as_sequence)
        .context("spec.triggers: missing or not a list")?;
    let external: Vec<(usize, &Value)> = triggers
        .iter()
        .enumerate()
        .filter(|(_, t)| t.get("type").and_then(Value::as_str) == Some("external"))
        .collect();
    let (index, trigger) = match external.as_slice() {
        [one] => *one,
        [] => bail!("spec.triggers: no trigger of type external (the scaler's)"),
        _ => bail!(
            "spec.triggers: {} triggers of type external; the backtest replays one",
            external.len()
        ),
    };
    let field = format!("spec.triggers[{index}].metadata");
    let map = trigger
        .get("metadata")
        .and_then(Value::as_mapping)
        .with_context(|| format!("{field}: missing or not a mapping"))?;
    let metadata = map
        .iter()
        .map(|(k, v)| {
            let key = k
                .as_str()
                .with_context(|| format!("{field}: key {} is not a string", render(k)))?;
            let value = v.as_str().with_context(|| {
                format!(
                    "{field}.{}: {} is not a string; KEDA's trigger metadata is strings only (quote it)",
                    key.chars().take(64).collect::<String>().escape_debug(),
                    render(v)
                )
            })?;
            Ok((key.to_owned(), value.to_owned()))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((index, metadata))
}

/// A value as YAML, bounded and escaped for an error message.
fn render(value: &Value) -> String {
    let yaml = serde_norway::to_string(value).unwrap_or_default();
    let short: String = yaml.trim().chars().take(64).collect();
    short.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use scaler_core::hpa::{PolicyType, ScalingPolicy};

    fn object(text: &str) -> anyhow::Result<ScaledObject> {
        parse(&serde_norway::from_str(text).unwrap())
    }

    const BASE: &str = r#"
kind: ScaledObject
metadata: {name: pg}
spec:
  minReplicaCount: 2
  maxReplicaCount: 6
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown:
          policies: [{periodSeconds: 600, type: Pods, value: 1}]
          tolerance: "0"
  triggers:
    - type: cpu
      metadata: {value: "50"}
    - type: external
      metadata: {scalerAddress: "s:6000", target: "150"}
"#;

    #[test]
    fn reads_the_external_trigger_bounds_and_behavior() {
        let so = object(BASE).unwrap();
        assert_eq!(
            (so.name.as_str(), so.min_replicas, so.max_replicas),
            ("pg", 2, 6)
        );
        assert_eq!(so.metadata["target"], "150");
        let behavior = so.behavior.unwrap();
        assert_eq!(
            behavior.scale_down.policies,
            [ScalingPolicy {
                kind: PolicyType::Pods,
                value: 1,
                period_seconds: 600
            }]
        );
        assert_eq!(behavior.scale_down.tolerance, 0.0);
        assert_eq!(behavior.scale_up.tolerance, 0.1);
        let without = BASE.replace("advanced:", "unrelated:");
        assert_eq!(object(&without).unwrap().behavior, None);
    }

    #[test]
    fn deep_nesting_and_files_that_are_not_regular_are_refused_fast() {
        let started = std::time::Instant::now();
        for deep in [
            format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000)),
            format!("a: {}", "{x: ".repeat(100_000)),
            (0..300)
                .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
                .collect(),
            format!("{}x", "- ".repeat(200)),
        ] {
            let error = check_nesting(&deep).unwrap_err().to_string();
            assert!(
                error.contains("nested") && error.contains("line"),
                "{error}"
            );
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // Brackets in quotes and comments are text, not nesting; a rendered chart passes.
        let quoted = format!(
            "a: \"{}\" # {}\nb: 'it''s [{}'\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        );
        check_nesting(&quoted).unwrap();
        check_nesting(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/scaler/fixtures/backtest-scaledobject.yaml"
            ))
            .unwrap(),
        )
        .unwrap();
        // A FIFO is refused without blocking; a directory too.
        let dir = std::env::temp_dir().join(format!("backtest-so-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("so.fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        for path in [fifo.as_path(), dir.as_path(), Path::new("/dev/zero")] {
            let error = read(path, None).unwrap_err();
            assert!(
                format!("{error:#}").contains("not a regular file"),
                "{error:#}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_list_or_several_documents_pick_by_name_and_keep_the_namespace() {
        let dir = std::env::temp_dir().join(format!("backtest-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let item = |name: &str, ns: &str| {
            BASE.replace(
                "metadata: {name: pg}",
                &format!("metadata: {{name: {name}, namespace: {ns}}}"),
            )
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
            .replacen("  kind:", "- kind:", 1)
        };
        let list = dir.join("list.yaml");
        let text = format!(
            "apiVersion: v1\nkind: List\nitems:\n{}{}",
            item("a", "ns-a"),
            item("b", "ns-b")
        );
        std::fs::write(&list, text).unwrap();
        let so = read(&list, Some("b")).unwrap();
        assert_eq!(
            (so.name.as_str(), so.namespace.as_deref(), so.trigger),
            ("b", Some("ns-b"), 1)
        );
        let error = read(&list, None).unwrap_err().to_string();
        assert!(
            error.contains(r#"2 ScaledObjects ("a", "b"); choose one with --name"#),
            "{error}"
        );
        let error = read(&list, Some("c")).unwrap_err().to_string();
        assert!(
            error.contains(r#"no ScaledObject named "c"; found: "a", "b""#),
            "{error}"
        );
        let multi = dir.join("multi.yaml");
        std::fs::write(
            &multi,
            format!("{BASE}---\n{}", BASE.replace("name: pg", "name: pg2")),
        )
        .unwrap();
        let so = read(&multi, Some("pg2")).unwrap();
        assert_eq!(so.namespace, None);
        let bad = dir.join("bad.yaml");
        std::fs::write(
            &bad,
            BASE.replace(
                "metadata: {name: pg}",
                "metadata: {name: pg, namespace: Not_A_Name}",
            ),
        )
        .unwrap();
        let error = format!("{:#}", read(&bad, None).unwrap_err());
        assert!(error.contains("metadata.namespace"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_list_of_many_names_only_the_first_few_in_the_error() {
        let dir = std::env::temp_dir().join(format!("backtest-many-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let list = dir.join("list.yaml");
        let items: String = (0..40_000)
            .map(|i| format!("- {{kind: ScaledObject, metadata: {{name: so-{i}}}}}\n"))
            .collect();
        std::fs::write(&list, format!("kind: List\nitems:\n{items}")).unwrap();
        for name in [None, Some("absent")] {
            let error = format!("{:#}", read(&list, name).unwrap_err());
            // Before: every name, 309 KB for 40,000 of them.
            assert!(error.len() < 400, "{} bytes: {error}", error.len());
            assert!(
                error.contains(r#""so-0", "so-1", "so-2", "so-3", "so-4" and 39995 more"#),
                "{error}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_field() {
        for (from, to, field) in [
            (
                r#"target: "150""#,
                "target: 150",
                "spec.triggers[1].metadata.target",
            ),
            (
                "maxReplicaCount: 6",
                "maxReplicaCount: -1",
                "spec.maxReplicaCount",
            ),
            (
                "minReplicaCount: 2",
                "minReplicaCount: 7",
                "spec.minReplicaCount (7)",
            ),
            ("type: Pods", "type: Replicas", "behavior"),
            (
                "periodSeconds: 600",
                "periodSeconds: 0",
                "behavior.scaleDown.policies[0].periodSeconds",
            ),
            (
                "type: external",
                "type: prometheus",
                "no trigger of type external",
            ),
        ] {
            let text = BASE.replace(from, to);
            let err = format!("{:#}", object(&text).unwrap_err());
            assert!(err.contains(field), "{to}: {err}");
        }
    }
}
