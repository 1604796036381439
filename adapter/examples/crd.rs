//! Prints the ScaleAdapter CRD as YAML: the source of charts/cozy-autoscaling/crds/scaleadapters.yaml.
use kube::CustomResourceExt;

fn main() -> anyhow::Result<()> {
    print!(
        "# Generated: cargo run -q -p adapter --example crd (from adapter/src/crd.rs).\n{}",
        serde_norway::to_string(&adapter::crd::ScaleAdapter::crd())?
    );
    Ok(())
}
