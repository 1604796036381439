use super::*;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../templates/package/flux-aio-deployment.yaml"
    );
    let text = std::fs::read_to_string(path).expect("fixture");
    serde_norway::from_str(&text).expect("parse fixture")
}

fn cfg() -> ShardConfig {
    ShardConfig {
        namespace: "cozy-fluxcd".into(),
        concurrent: "5".into(),
        events_addr: None,
        source_controller: None,
    }
}

/// Deployment `helm-controller-shard<id>`, as `chartgen shards` writes it.
fn build_shard(flux: &Value, id: ShardIndex, cfg: &ShardConfig) -> Result<Value, ShardError> {
    Ok(instantiate(
        &sanitise(flux, cfg.events_addr.as_deref())?,
        id,
        cfg,
    ))
}

/// The args shard `id` gets: the slots of `arg_slots` filled.
fn shard_args(
    args: &[String],
    id: ShardIndex,
    cfg: &ShardConfig,
) -> Result<Vec<String>, ShardError> {
    Ok(fill_slots(
        &arg_slots(args, cfg.events_addr.as_deref())?,
        id,
        &cfg.concurrent,
    ))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn keeps_only_helm_controller_and_sanitises_pod() {
    let d = build_shard(&fixture(), 2, &cfg()).unwrap();
    assert_eq!(d["metadata"]["name"], "helm-controller-shard2");
    assert_eq!(d["metadata"]["namespace"], "cozy-fluxcd");
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/version"],
        "v2.8.0"
    );
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "helm-controller-shard2"
    );
    let pod = &d["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["name"], "helm-controller");
    assert_eq!(pod["hostNetwork"], false);
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert!(pod.get("tolerations").is_none());
    assert!(pod["affinity"].get("podAntiAffinity").is_none());
    assert!(pod["affinity"].get("nodeAffinity").is_some());
    let vols: Vec<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vols, ["tmp"]);
    let env: Vec<&str> = containers[0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(env, ["RUNTIME_NAMESPACE", "GOMEMLIMIT", "TUF_ROOT"]);
    let startup = &containers[0]["startupProbe"];
    assert_eq!(startup["httpGet"]["port"], "healthz-hc");
    assert_eq!(startup["failureThreshold"], 30);
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "helm-controller-shard2"
    );
}

#[test]
fn args_are_canonical_and_others_kept_in_order() {
    let d = build_shard(&fixture(), 0, &cfg()).unwrap();
    let args: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "--watch-all-namespaces",
            "--log-level=info",
            "--log-encoding=json",
            "--enable-leader-election=false",
            "--metrics-addr=:9795",
            "--health-addr=:9796",
            "--watch-label-selector=sharding.fluxcd.io/key=shard0",
            "--concurrent=5",
            "--requeue-dependency=30s",
            "--feature-gates=ExternalArtifact=true",
        ]
    );
}

#[test]
fn two_token_flags_are_consumed_and_rewritten() {
    let args = strings(&[
        "--watch-label-selector",
        "!sharding.fluxcd.io/key",
        "--concurrent",
        "10",
        "--events-addr",
        "http://localhost:9690",
        "--log-level=debug",
    ]);
    let c = ShardConfig {
        concurrent: "7".into(),
        ..cfg()
    };
    let out = shard_args(&args, 3, &c).unwrap();
    assert_eq!(
        out,
        [
            "--watch-label-selector=sharding.fluxcd.io/key=shard3",
            "--concurrent=7",
            "--log-level=debug"
        ]
    );
}

#[test]
fn missing_flags_are_appended_and_events_replaced_when_configured() {
    let c = ShardConfig {
        events_addr: Some("http://notification-controller.cozy-fluxcd.svc".into()),
        ..cfg()
    };
    let out = shard_args(
        &strings(&["--log-level=info", "--events-addr=http://localhost:9690"]),
        1,
        &c,
    )
    .unwrap();
    assert_eq!(
        out,
        [
            "--log-level=info",
            "--events-addr=http://notification-controller.cozy-fluxcd.svc",
            "--watch-label-selector=sharding.fluxcd.io/key=shard1",
            "--concurrent=5",
        ]
    );
}

#[test]
fn duplicate_selectors_collapse_to_one() {
    let args = strings(&[
        "--watch-label-selector=a=b",
        "--watch-label-selector",
        "c=d",
    ]);
    let out = shard_args(&args, 0, &cfg()).unwrap();
    assert_eq!(
        out,
        [
            "--watch-label-selector=sharding.fluxcd.io/key=shard0",
            "--concurrent=5"
        ]
    );
}

#[test]
fn flag_without_value_is_an_error() {
    let err = shard_args(&strings(&["--concurrent", "--log-level=info"]), 0, &cfg()).unwrap_err();
    assert_eq!(err, ShardError::FlagWithoutValue("--concurrent".into()));
}

#[test]
fn lowercase_proxy_and_kubeprism_env_dropped_source_address_set() {
    let flux = json!({"metadata": {}, "spec": {"template": {"spec": {
    "hostNetwork": false,
    "containers": [
        {"name": "helm-controller", "args": [], "ports": [{"containerPort": 9795, "hostPort": 9795}],
         "env": [{"name": "http_proxy", "value": "x"}, {"name": "no_proxy", "value": "x"},
                 {"name": "KUBERNETES_SERVICE_HOST", "value": "localhost"},
                 {"name": "KUBERNETES_SERVICE_PORT", "value": "7445"}, {"name": "EXTRA", "value": "1"}]},
        {"name": "source-controller"}
    ]}}}});
    let c = ShardConfig {
        source_controller: Some("source-controller.cozy-fluxcd.svc:80".into()),
        ..cfg()
    };
    let d = build_shard(&flux, 0, &c).unwrap();
    let ctr = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        ctr["env"],
        json!([{"name": "EXTRA", "value": "1"},
               {"name": "SOURCE_CONTROLLER_LOCALHOST", "value": "source-controller.cozy-fluxcd.svc:80"}])
    );
    assert!(ctr["ports"][0].get("hostPort").is_none());
    assert!(
        ctr.get("startupProbe").is_none(),
        "no liveness probe, so no startup probe"
    );
    assert!(d["spec"]["template"]["spec"].get("volumes").is_none());
}

#[test]
fn missing_helm_controller_is_a_clear_error() {
    let flux =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "source-controller"}]}}}});
    let err = build_shard(&flux, 0, &cfg()).unwrap_err();
    assert!(
        err.to_string().contains("no 'helm-controller' container"),
        "{err}"
    );
}

#[test]
fn building_twice_is_identical() {
    let a = build_shard(&fixture(), 1, &cfg()).unwrap();
    let b = build_shard(&fixture(), 1, &cfg()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn auto_count_uses_placement_autosizing() {
    assert_eq!(auto_count(946, 128), 10);
    assert_eq!(auto_count(250, 2), 2);
    assert_eq!(auto_count(0, 0), 1);
}

#[test]
fn sanitised_deployment_leaves_only_the_per_shard_parts_open() {
    let base = sanitise(&fixture(), None).unwrap();
    assert!(base["metadata"].get("name").is_none());
    assert!(base["metadata"].get("namespace").is_none());
    assert!(base["spec"].get("selector").is_none());
    let c = &base["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(args[6..8], [SELECTOR_SLOT, CONCURRENT_SLOT]);
    assert!(
        !c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "SOURCE_CONTROLLER_LOCALHOST")
    );
    let d = instantiate(&base, 4, &cfg());
    assert_eq!(d["metadata"]["name"], "helm-controller-shard4");
    let filled = &d["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        filled[6],
        "--watch-label-selector=sharding.fluxcd.io/key=shard4"
    );
    assert_eq!(filled[7], "--concurrent=5");
}
