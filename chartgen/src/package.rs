//! `chartgen package`: renders the platform package chart and its PackageSource from
//! `templates/package/`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};

use crate::output::{Plan, read};
use crate::render::Renderer;
use crate::shards::{self, ShardConfig};

/// Chart name, also the release name and helper prefix.
pub const CHART: &str = "cozy-autoscaling";
const CHART_TEMPLATES: &str = "package/chart";
/// Where release pipelines push the image `./run.sh image` builds (docs/image.md).
pub const IMAGE_REPOSITORY: &str = "ghcr.io/cozystack/cozy-autoscaling";
/// The chart's version and appVersion, hence the image tag: the crates' version, so the chart a
/// commit generates points at the image the same commit builds.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The package's ClusterTriggerAuthentication (KEDA's mTLS client credentials for the scaler),
/// which app charts reference by default.
pub const TRIGGER_AUTHENTICATION: &str = "cozy-autoscaling-scaler";

#[derive(Serialize)]
struct Ctx<'a> {
    chart: &'a str,
    version: &'a str,
    image_repository: &'a str,
    shard_key: &'a str,
    /// Only for the shards wrapper: the sanitised Deployment as YAML.
    shard: String,
}

/// Everything `chartgen package` would write under `out` (the charts directory).
pub fn plan(out: &Path, flux_deployment: &Path, r: &Renderer) -> anyhow::Result<Plan> {
    let chart_dir = out.join(CHART);
    let mut plan = Plan::default();
    plan.own_dir(&chart_dir);
    let ctx = Ctx {
        chart: CHART,
        version: VERSION,
        image_repository: IMAGE_REPOSITORY,
        shard_key: shards::SHARD_KEY,
        shard: shard_template(flux_deployment)?,
    };
    for rel in files_under(&r.dir().join(CHART_TEMPLATES))? {
        let name = format!("{CHART_TEMPLATES}/{}", rel.to_string_lossy());
        plan.add(chart_dir.join(&rel), r.render(&name, &ctx)?);
    }
    plan.add(
        out.join("sources").join(format!("{CHART}.yaml")),
        r.render("package/packagesource.yaml", &ctx)?,
    );
    Ok(plan)
}

/// One shard Deployment whose index, namespace, concurrency, image and source-controller
/// address are Helm expressions, for the chart's `range` over `.Values.shards.count`.
fn shard_template(flux_deployment: &Path) -> anyhow::Result<String> {
    let flux: Value = serde_norway::from_str(&read(flux_deployment)?)
        .with_context(|| format!("'{}' is not a YAML Deployment", flux_deployment.display()))?;
    let cfg = ShardConfig {
        namespace: "{{ $.Values.flux.namespace }}".into(),
        concurrent: "{{ int $.Values.shards.concurrent }}".into(),
        events_addr: None,
        source_controller: Some(format!("{{{{ include \"{CHART}.sourceController\" $ }}}}")),
    };
    let mut d = shards::build_shard(&flux, "{{ $i }}", &cfg)?;
    let container = &mut d["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().unwrap_or_default().to_owned();
    container["image"] = json!(format!(
        "{{{{ $.Values.shards.image | default \"{image}\" }}}}"
    ));
    d["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("{{ $.Release.Service }}");
    Ok(serde_norway::to_string(&d)?)
}

/// Files under `dir`, relative to it, sorted.
fn files_under(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        for entry in
            std::fs::read_dir(dir).with_context(|| format!("cannot list '{}'", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                walk(base, &path, out)?;
            } else if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.to_path_buf());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}
