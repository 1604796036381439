//! `chartgen app --verify`: renders the autoscaling mode matrix with real helm binaries and
//! validates every object against the CRDs given, after API-server-style defaulting. What `helm
//! lint` cannot do: it passes no `--api-versions`, so the enabled path never renders there.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::engine::Engine;
use super::matrix::{ADAPTER_API, ADAPTER_KIND, Case, Expect};
use super::{AppSpec, Outcome};
use crate::output::read;

fn cases(spec: &AppSpec) -> Vec<Case> {
    let on = |more: &[&str]| {
        std::iter::once("autoscaling.enabled=true".to_owned())
            .chain(more.iter().map(|s| (*s).to_owned()))
            .collect::<Vec<_>>()
    };
    let renders = |scaled, paused| Expect::Renders { scaled, paused };
    let key = &spec.values_key;
    let (signal, floor_refusal) = match spec.engine {
        Engine::Cnpg => ("ReadConnectionUsage", "below the quorum floor"),
        Engine::Redis => ("ReadCommandsPerSecond", "is below the floor"),
    };
    let signal = format!("autoscaling.signals[0].metric={signal}");
    vec![
        Case {
            name: "off",
            sets: vec![],
            keda: false,
            expect: renders(false, false),
            poolers: None,
        },
        Case {
            name: "on",
            sets: on(&[]),
            keda: true,
            expect: renders(true, false),
            poolers: None,
        },
        Case {
            name: "transition",
            sets: on(&["autoscaling.transition=true"]),
            keda: true,
            expect: renders(true, true),
            poolers: None,
        },
        Case {
            name: "dryRun",
            sets: on(&["autoscaling.dryRun=true"]),
            keda: true,
            expect: renders(true, true),
            poolers: None,
        },
        Case {
            name: "controls: a second signal, scale-in off and a schedule",
            sets: on(&[
                "autoscaling.scaleIn=disabled",
                &signal,
                "autoscaling.signals[0].target=70",
                "autoscaling.schedules[0].cron=0 8 * * 1-5",
                "autoscaling.schedules[0].duration=10h",
                "autoscaling.schedules[0].floor=4",
                "autoscaling.schedules[0].timeZone=Europe/Berlin",
            ]),
            keda: true,
            expect: renders(true, false),
            poolers: None,
        },
        Case {
            name: "guard: schedule floor > maxReplicas",
            sets: on(&[
                "autoscaling.schedules[0].cron=0 8 * * *",
                "autoscaling.schedules[0].duration=1h",
                "autoscaling.schedules[0].floor=7",
                "autoscaling.maxReplicas=6",
            ]),
            keda: true,
            expect: Expect::Fails("is above autoscaling.maxReplicas"),
            poolers: None,
        },
        Case {
            name: "guard: no KEDA API",
            sets: on(&[]),
            keda: false,
            expect: Expect::Fails("needs KEDA"),
            poolers: None,
        },
        Case {
            name: "guard: target < 1",
            sets: on(&["autoscaling.target=0"]),
            keda: true,
            expect: Expect::Fails("autoscaling.target must be at least 1"),
            poolers: None,
        },
        Case {
            name: "guard: floor > maxReplicas",
            sets: on(&["autoscaling.minReplicas=5", "autoscaling.maxReplicas=4"]),
            keda: true,
            expect: Expect::Fails(floor_refusal),
            poolers: None,
        },
        Case {
            name: "guard: count > maxReplicas",
            sets: vec![
                "autoscaling.enabled=true".into(),
                format!("{key}=9"),
                "autoscaling.maxReplicas=8".into(),
            ],
            keda: true,
            expect: Expect::Fails("is above autoscaling.maxReplicas"),
            poolers: None,
        },
        Case {
            name: "guard: maxReplicas > 100",
            sets: on(&["autoscaling.maxReplicas=101"]),
            keda: true,
            expect: Expect::Fails("above the hard ceiling of 100"),
            poolers: None,
        },
        Case {
            name: "guard: empty scalerAddress",
            sets: on(&["autoscaling.scalerAddress="]),
            keda: true,
            expect: Expect::Fails("scalerAddress is empty"),
            poolers: None,
        },
    ]
    .into_iter()
    .chain(super::pooler::verify::cases(spec))
    .collect()
}

/// Runs the matrix; prints one line per case and helm; exit 1 when any fails.
/// What to render: the chart, extra values files, and the release name and namespace.
pub struct Target<'a> {
    pub chart: &'a Path,
    pub values: &'a [PathBuf],
    pub release: &'a str,
    pub namespace: &'a str,
    /// How long one `helm template` may run before it is killed.
    pub timeout: Duration,
    /// Bytes of data memory one `helm template` may use (its RLIMIT_DATA).
    pub max_memory: u64,
}

/// Most output kept from one `helm template` (stdout; stderr gets [`MAX_STDERR`]): far above any
/// real render, so a runaway template fails the case instead of filling memory.
const MAX_OUTPUT: u64 = 64 << 20;
/// The caps of helm's stdout and stderr.
const CAPS: [u64; 2] = [MAX_OUTPUT, 1 << 20];

/// What a bounded helm run produced.
struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` with its output read into at most [`MAX_OUTPUT`] bytes, its data memory limited
/// to `max_memory` bytes and killed after `timeout`; each limit fails the run with a message
/// naming it.
fn bounded(mut cmd: Command, timeout: Duration, max_memory: u64) -> anyhow::Result<Ran> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // helm renders every template into memory before it writes a byte, so the output cap alone
    // let a runaway render reach gigabytes. RLIMIT_DATA (not the address space: Go reserves
    // about a gigabyte of it at start) bounds what Go's heap can map; set on the child from
    // here, as setting it between fork and exec would take unsafe code.
    if let Err(e) = limit_data(child.id(), max_memory) {
        let _ = child.kill();
        let _ = child.wait();
        bail!("cannot limit helm's memory: {e}");
    }
    let (tx, rx) = mpsc::channel();
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("piped")),
        Box::new(child.stderr.take().expect("piped")),
    ];
    for (i, (pipe, cap)) in pipes.into_iter().zip(CAPS).enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let read = pipe.take(cap + 1).read_to_end(&mut bytes);
            let _ = tx.send((i, read.map(|_| bytes)));
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let mut out: [Option<Vec<u8>>; 2] = [None, None];
    let mut failure = None;
    while out.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, Ok(bytes))) if bytes.len() as u64 > CAPS[i] => {
                failure = Some(format!(
                    "helm wrote more than {} MiB to {}; the render is runaway",
                    CAPS[i] >> 20,
                    ["stdout", "stderr"][i]
                ));
                break;
            }
            Ok((i, Ok(bytes))) => out[i] = Some(bytes),
            Ok((_, Err(e))) => {
                failure = Some(format!("cannot read helm's output: {e}"));
                break;
            }
            Err(_) => {
                failure = Some(format!(
                    "helm did not finish within {} s (--helm-timeout)",
                    timeout.as_secs()
                ));
                break;
            }
        }
    }
    if let Some(why) = failure {
        let _ = child.kill();
        let _ = child.wait();
        bail!("{why}");
    }
    let status = child.wait()?;
    let [stdout, stderr] =
        out.map(|b| String::from_utf8_lossy(&b.unwrap_or_default()).into_owned());
    // How Go's runtime dies when a mapping fails: "fatal error: runtime: out of memory",
    // "fatal error: out of memory allocating heap arena map", "...: cannot allocate memory".
    let starved = ["out of memory", "cannot allocate memory"]
        .iter()
        .any(|why| stderr.contains(why));
    if !status.success() && stderr.contains("fatal error: ") && starved {
        bail!(
            "helm needed more than {} MiB of memory (--helm-max-memory); the render is runaway",
            max_memory >> 20
        );
    }
    Ok(Ran {
        success: status.success(),
        stdout,
        stderr,
    })
}

/// Sets the data-segment limit (soft and hard) of process `pid`, a child of ours.
#[cfg(target_os = "linux")]
fn limit_data(pid: u32, bytes: u64) -> std::io::Result<()> {
    use rustix::process::{Pid, Resource, Rlimit, prlimit};
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other(format!("no such process id {pid}")))?;
    let limit = Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    prlimit(Some(pid), Resource::Data, limit)?;
    Ok(())
}

/// No prlimit outside Linux: helm's memory is bounded there only by the output cap
/// (docs/chartgen.md says so).
#[cfg(not(target_os = "linux"))]
fn limit_data(_pid: u32, _bytes: u64) -> std::io::Result<()> {
    Ok(())
}

pub fn run(
    target: &Target,
    outcome: &Outcome,
    helms: &[PathBuf],
    crds: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    let chart = target.chart;
    let (plan, spec) = (&outcome.plan, &outcome.spec);
    if !plan.drift()?.is_empty() {
        bail!(
            "'{}' is not up to date: run chartgen app on it first (or --check to see what differs)",
            chart.display()
        );
    }
    let schemas = Schemas::load(crds)?;
    let mut kinds = vec![
        ("keda.sh/v1alpha1", "ScaledObject"),
        (spec.target_api_version.as_str(), spec.target_kind.as_str()),
    ];
    if spec.engine == Engine::Redis || !spec.poolers.is_empty() {
        kinds.push((ADAPTER_API, ADAPTER_KIND));
    }
    if !spec.poolers.is_empty() {
        kinds.push((super::pooler::API_VERSION, super::pooler::KIND));
    }
    for (api, kind) in kinds {
        if !schemas.has(api, kind) {
            bail!("no CRD for {api} {kind} in --crds: pass the file or directory holding it");
        }
    }
    let mut failures = 0;
    for helm in helms {
        for case in cases(spec) {
            let result = check(helm, target, spec, &schemas, &case);
            match &result {
                Ok(()) => println!("ok   {} {}", helm.display(), case.name),
                Err(e) => {
                    failures += 1;
                    println!("FAIL {} {}: {e:#}", helm.display(), case.name);
                }
            }
        }
    }
    println!(
        "{} passed, {failures} failed",
        helms.len() * cases(spec).len() - failures
    );
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn check(
    helm: &Path,
    target: &Target,
    spec: &AppSpec,
    schemas: &Schemas,
    case: &Case,
) -> anyhow::Result<()> {
    let mut cmd = Command::new(helm);
    cmd.args(["template", target.release])
        .arg(target.chart)
        .args(["--namespace", target.namespace]);
    for file in target.values {
        cmd.arg("-f").arg(file);
    }
    if case.keda {
        cmd.args(["--api-versions", "keda.sh/v1alpha1"]);
    }
    for s in &case.sets {
        cmd.arg("--set").arg(s);
    }
    let out = bounded(cmd, target.timeout, target.max_memory)
        .with_context(|| format!("'{}'", helm.display()))?;
    let stderr = &out.stderr;
    match case.expect {
        Expect::Fails(text) => {
            if out.success {
                bail!("rendered, but the guard should have refused it");
            }
            if !stderr.contains(text) {
                bail!("failed without `{text}` in the message: {}", stderr.trim());
            }
            Ok(())
        }
        Expect::Renders { scaled, paused } => {
            if !out.success {
                bail!("helm template failed: {}", stderr.trim());
            }
            if let Some(line) = super::values::deeper_than(&out.stdout, super::values::MAX_DEPTH) {
                bail!(
                    "the render nests deeper than {} levels (line {line}); chartgen does not parse it",
                    super::values::MAX_DEPTH
                );
            }
            let objects = documents(&out.stdout)?;
            if spec.engine == Engine::Redis {
                redis_engines(&objects, spec)?;
            }
            for o in &objects {
                schemas.validate(o)?;
            }
            check_target(&objects, spec, target.namespace, scaled, paused)?;
            super::pooler::verify::check(&objects, spec, target.namespace, case.poolers)
        }
    }
}

/// Every rendered RedisFailover runs an engine its operator knows (`spec.engine` unset, Redis or
/// Valkey), whatever the CRDs given declare: spotahome's has no such field, the fork's an enum.
fn redis_engines(objects: &[Value], spec: &AppSpec) -> anyhow::Result<()> {
    use names::redis_failover::{ENGINE_FIELD, ENGINE_POINTER, check_engine};
    for o in objects
        .iter()
        .filter(|o| o["kind"] == spec.target_kind.as_str())
    {
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        match o.pointer(ENGINE_POINTER) {
            None | Some(Value::Null) => {}
            Some(Value::String(engine)) => {
                check_engine(engine)
                    .map_err(|e| anyhow::anyhow!("{}/{name}: {e}", spec.target_kind))?;
            }
            Some(other) => bail!(
                "{}/{name}: {ENGINE_FIELD} renders {}, not Redis or Valkey",
                spec.target_kind,
                names::escape(&other.to_string(), names::ECHO_MAX)
            ),
        }
    }
    Ok(())
}

/// The ScaledObject (if any) must sit next to a rendered target of the right kind and name, with
/// a floor that covers the target's own synchronous quorum.
fn check_target(
    objects: &[Value],
    spec: &AppSpec,
    release_namespace: &str,
    scaled: bool,
    paused: bool,
) -> anyhow::Result<()> {
    let targets: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            o["kind"] == spec.target_kind.as_str()
                && o["apiVersion"] == spec.target_api_version.as_str()
        })
        .collect();
    // The Poolers' pairs are checked on their own (pooler/verify.rs).
    let scaled_objects: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ScaledObject" && !super::pooler::verify::is_pooler_pair(o))
        .collect();
    if targets.is_empty() {
        bail!(
            "no {} {} rendered",
            spec.target_api_version,
            spec.target_kind
        );
    }
    match (scaled, scaled_objects.as_slice()) {
        (false, []) => Ok(()),
        (false, _) => bail!("a ScaledObject rendered with autoscaling off"),
        (true, [so]) => {
            let target = scaled_target(objects, spec, so, &targets, paused)?;
            same_namespace(so, target, release_namespace)?;
            floor_covers_quorum(so, target)?;
            pause_matches(so, paused)?;
            if target.pointer(&spec.pointer()).is_none() {
                bail!("the target renders no `{}`", spec.pointer());
            }
            Ok(())
        }
        (true, many) => bail!("expected one ScaledObject, got {}", many.len()),
    }
}

/// KEDA scales a target in the ScaledObject's own namespace only.
fn same_namespace(so: &Value, target: &Value, release_namespace: &str) -> anyhow::Result<()> {
    let ns = |o: &Value| {
        o.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(release_namespace)
            .to_owned()
    };
    if ns(target) != ns(so) {
        bail!(
            "the ScaledObject is in namespace `{}` but its target in `{}`: KEDA needs them together",
            ns(so),
            ns(target)
        );
    }
    Ok(())
}

/// The replica floor keeps the target's synchronous quorum plus a primary.
fn floor_covers_quorum(so: &Value, target: &Value) -> anyhow::Result<()> {
    let quorum = [
        "/spec/maxSyncReplicas",
        "/spec/postgresql/synchronous/number",
    ]
    .iter()
    .filter_map(|p| target.pointer(p).and_then(Value::as_i64))
    .max()
    .unwrap_or(0);
    let floor = so
        .pointer("/spec/minReplicaCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if floor < quorum + 1 {
        bail!("minReplicaCount {floor} is below the target's synchronous quorum {quorum} + 1");
    }
    Ok(())
}

/// Paused means both of KEDA's pause annotations, exactly when the values ask for it.
fn pause_matches(so: &Value, paused: bool) -> anyhow::Result<()> {
    let annotations = so
        .pointer("/metadata/annotations")
        .cloned()
        .unwrap_or(json!({}));
    let is_paused = annotations
        .get("autoscaling.keda.sh/paused-scale-in")
        .is_some()
        && annotations
            .get("autoscaling.keda.sh/paused-scale-out")
            .is_some();
    if is_paused != paused {
        bail!(
            "the ScaledObject is {}paused",
            if is_paused { "" } else { "not " }
        );
    }
    Ok(())
}

/// The target the ScaledObject drives: the one its `scaleTargetRef` names, or, for a kind
/// without a scale subresource, the one the ScaleAdapter it names drives (that adapter in the
/// ScaledObject's namespace, at the count's path, paused exactly when the ScaledObject is).
fn scaled_target<'a>(
    objects: &'a [Value],
    spec: &AppSpec,
    so: &Value,
    targets: &[&'a Value],
    paused: bool,
) -> anyhow::Result<&'a Value> {
    let str_at = |o: &Value, p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let reference = |p: &str| str_at(so, &format!("/spec/scaleTargetRef/{p}")).unwrap_or_default();
    let (api, kind, name) = (
        reference("apiVersion"),
        reference("kind"),
        reference("name"),
    );
    let name = match spec.engine {
        Engine::Cnpg => name,
        Engine::Redis => {
            if (api.as_str(), kind.as_str()) != (ADAPTER_API, ADAPTER_KIND) {
                bail!("the ScaledObject targets {api} {kind}, not the {ADAPTER_KIND}");
            }
            let Some(adapter) = objects.iter().find(|o| {
                o["kind"] == ADAPTER_KIND && str_at(o, "/metadata/name").as_deref() == Some(&name)
            }) else {
                bail!(
                    "the ScaledObject targets {ADAPTER_KIND} `{name}`, which the chart does not render"
                );
            };
            if str_at(adapter, "/metadata/namespace") != str_at(so, "/metadata/namespace") {
                bail!("the {ADAPTER_KIND} and the ScaledObject are in different namespaces");
            }
            if str_at(adapter, "/spec/replicasPath") != Some(spec.pointer()) {
                bail!("the {ADAPTER_KIND} does not drive {}", spec.pointer());
            }
            if adapter.pointer("/spec/paused").and_then(Value::as_bool) != Some(paused) {
                bail!(
                    "the {ADAPTER_KIND} is {}paused",
                    if paused { "not " } else { "" }
                );
            }
            if str_at(adapter, "/spec/targetRef/kind").as_deref() != Some(&spec.target_kind) {
                bail!("the {ADAPTER_KIND} does not target a {}", spec.target_kind);
            }
            str_at(adapter, "/spec/targetRef/name").unwrap_or_default()
        }
    };
    targets
        .iter()
        .find(|t| str_at(t, "/metadata/name").as_deref() == Some(&name))
        .copied()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the ScaledObject targets {} `{name}`, which the chart does not render",
                spec.target_kind
            )
        })
}

fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v: Value =
            serde::Deserialize::deserialize(doc).context("helm rendered invalid YAML")?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// CRD schemas by (apiVersion, kind), made strict: unknown fields fail, as the API server prunes
/// or rejects them.
struct Schemas {
    by_kind: Vec<(String, String, Value, jsonschema::Validator)>,
}

impl Schemas {
    fn load(paths: &[PathBuf]) -> anyhow::Result<Self> {
        let mut files = Vec::new();
        for p in paths {
            if p.is_dir() {
                let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                    .with_context(|| format!("cannot list '{}'", p.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|f| f.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                    .collect();
                entries.sort();
                files.extend(entries);
            } else {
                files.push(p.clone());
            }
        }
        let mut by_kind = Vec::new();
        for f in files {
            for crd in documents(&read(&f)?).with_context(|| format!("in '{}'", f.display()))? {
                if crd["kind"] != "CustomResourceDefinition" {
                    continue;
                }
                let group = crd["spec"]["group"].as_str().unwrap_or_default();
                let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
                for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
                    let schema = strict(with_object_meta(v["schema"]["openAPIV3Schema"].clone()));
                    let validator = jsonschema::draft7::new(&schema)
                        .map_err(|e| anyhow::anyhow!("'{}': {kind} schema: {e}", f.display()))?;
                    let api = format!("{group}/{}", v["name"].as_str().unwrap_or_default());
                    by_kind.push((api, kind.to_owned(), schema, validator));
                }
            }
        }
        Ok(Self { by_kind })
    }

    fn has(&self, api: &str, kind: &str) -> bool {
        self.by_kind
            .iter()
            .any(|(a, k, _, _)| a == api && k == kind)
    }

    /// Validates a custom resource after defaulting; other kinds pass (helm already parsed them).
    fn validate(&self, obj: &Value) -> anyhow::Result<()> {
        let (api, kind) = (
            obj["apiVersion"].as_str().unwrap_or(""),
            obj["kind"].as_str().unwrap_or(""),
        );
        let Some((_, _, schema, validator)) = self
            .by_kind
            .iter()
            .find(|(a, k, _, _)| a == api && k == kind)
        else {
            return Ok(());
        };
        let mut obj = obj.clone();
        apply_defaults(schema, &mut obj);
        if let Some(e) = validator.iter_errors(&obj).next() {
            bail!(
                "{kind}/{}: {}: {e}",
                obj.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                e.instance_path()
            );
        }
        Ok(())
    }
}

/// The API server accepts `apiVersion`, `kind` and `metadata` on every custom resource, whether
/// its schema lists them or not (kube-derive's, the ScaleAdapter's, does not).
fn with_object_meta(mut schema: Value) -> Value {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (key, kind) in [
            ("apiVersion", "string"),
            ("kind", "string"),
            ("metadata", "object"),
        ] {
            props.entry(key).or_insert_with(
                || json!({"type": kind, "x-kubernetes-preserve-unknown-fields": true}),
            );
        }
    }
    schema
}

/// Every object schema that lists properties rejects others, unless it preserves unknown fields.
fn strict(mut schema: Value) -> Value {
    fn walk(s: &mut Value) {
        match s {
            Value::Object(m) => {
                if m.contains_key("properties")
                    && !m.contains_key("additionalProperties")
                    && m.get("x-kubernetes-preserve-unknown-fields") != Some(&Value::Bool(true))
                {
                    m.insert("additionalProperties".into(), Value::Bool(false));
                }
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut schema);
    schema
}

/// What the API server does before validating a custom resource: drops null fields whose schema
/// is not `nullable`, then fills absent fields that have a schema default.
fn apply_defaults(schema: &Value, obj: &mut Value) {
    match obj {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                m.retain(|key, v| {
                    !v.is_null()
                        || props.get(key).and_then(|p| p.get("nullable"))
                            == Some(&Value::Bool(true))
                });
                for (key, sub) in props {
                    if !m.contains_key(key)
                        && let Some(d) = sub.get("default")
                    {
                        m.insert(key.clone(), d.clone());
                    }
                    if let Some(child) = m.get_mut(key) {
                        apply_defaults(sub, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|i| apply_defaults(sub, i));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_and_strictness_rejects_unknown_fields() {
        let schema = strict(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"instances": {"type": "integer", "default": 1}}}}}),
        );
        let mut obj = json!({"spec": {}, "status": null});
        apply_defaults(&schema, &mut obj);
        assert_eq!(obj, json!({"spec": {"instances": 1}}));
        let v = jsonschema::draft7::new(&schema).unwrap();
        assert!(v.is_valid(&obj));
        assert!(!v.is_valid(&json!({"spec": {"instances": 1, "bogus": true}})));
    }
}
