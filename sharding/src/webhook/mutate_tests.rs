use serde_json::json;

use super::*;
use crate::webhook::review::AdmissionReview;

fn mk_review(operation: &str, namespace: &str, object: Value) -> AdmissionRequest {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "helm.toolkit.fluxcd.io", "version": "v2", "kind": "HelmRelease"},
            "resource": {"group": "helm.toolkit.fluxcd.io", "version": "v2", "resource": "helmreleases"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:cozy-system:cozystack-api"},
            "object": object,
            "oldObject": null,
            "dryRun": false
        }
    });
    AdmissionReview::from_slice(&serde_json::to_vec(&body).unwrap())
        .unwrap()
        .request
}

fn mk_hr(namespace: &str, name: &str, labels: Option<Value>) -> Value {
    let mut hr = json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"interval": "5m", "chartRef": {"kind": "ExternalArtifact", "name": "postgres"}}
    });
    if let Some(labels) = labels {
        hr["metadata"]["labels"] = labels;
    }
    hr
}

fn pending(req: &AdmissionRequest) -> Pending {
    match admit(req) {
        Admit::NeedsShard(p) => p,
        Admit::Done(o) => panic!("expected a shard lookup, got {:?}", o.reason),
    }
}

fn reason(req: &AdmissionRequest) -> Reason {
    match admit(req) {
        Admit::Done(o) => {
            assert!(o.response.allowed && o.response.patch.is_none());
            o.reason
        }
        Admit::NeedsShard(p) => panic!("unexpected shard lookup for {}", p.tenant),
    }
}

/// Applies the outcome's patch to `object` the way the API server does.
fn applied(outcome: &Outcome, mut object: Value) -> Value {
    let bytes = &outcome.response.patch.as_ref().expect("a patch").0;
    let patch: Patch = serde_json::from_slice(bytes).unwrap();
    json_patch::patch(&mut object, &patch).unwrap();
    object
}

#[test]
fn wrong_canonical_shard_is_overwritten_with_the_tenants() {
    let hr = mk_hr(
        "tenant-foo",
        "redis",
        Some(json!({"sharding.fluxcd.io/key": "shard3"})),
    );
    let out = pending(&mk_review("CREATE", "tenant-foo", hr.clone())).finish(Ok(1));
    assert_eq!(
        applied(&out, hr)["metadata"]["labels"]["sharding.fluxcd.io/key"],
        "shard1"
    );
}

#[test]
fn unresolved_shard_allows_unchanged() {
    let hr = mk_hr("tenant-foo", "redis", None);
    for miss in [
        Reason::NoReadyShard,
        Reason::ApiError,
        Reason::Timeout,
        Reason::NotSynced,
    ] {
        let out = pending(&mk_review("CREATE", "tenant-foo", hr.clone())).finish(Err(miss));
        assert_eq!(out.reason, miss);
        assert!(out.response.allowed && out.response.patch.is_none());
    }
}

#[test]
fn namespace_comes_from_the_request_when_the_object_omits_it() {
    let mut hr = mk_hr("x", "redis", None);
    hr["metadata"].as_object_mut().unwrap().remove("namespace");
    assert_eq!(
        pending(&mk_review("CREATE", "tenant-bar", hr)).tenant,
        "tenant-bar"
    );
}

#[test]
fn tenant_release_is_attributed_to_the_child_tenant() {
    let labels = json!({"apps.cozystack.io/application.kind": "Tenant", "sharding.fluxcd.io/key": "tenants"});
    let p = pending(&mk_review(
        "CREATE",
        "tenant-root",
        mk_hr("tenant-root", "tenant-foo", Some(labels.clone())),
    ));
    assert_eq!(p.tenant, "tenant-foo");
    let p = pending(&mk_review(
        "CREATE",
        "tenant-foo",
        mk_hr("tenant-foo", "tenant-bar", Some(labels)),
    ));
    assert_eq!(p.tenant, "tenant-foo-bar");
}

#[test]
fn dry_run_is_carried() {
    let mut req = mk_review("CREATE", "tenant-foo", mk_hr("tenant-foo", "redis", None));
    req.dry_run = Some(true);
    assert!(pending(&req).dry_run);
}

#[test]
fn response_serialises_as_admission_review_v1() {
    let out = pending(&mk_review(
        "CREATE",
        "tenant-foo",
        mk_hr("tenant-foo", "redis", None),
    ))
    .finish(Ok(1));
    let v = serde_json::to_value(out.response.into_review()).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["response"]["patchType"], "JSONPatch");
    // base64 of the patch document.
    assert!(
        v["response"]["patch"]
            .as_str()
            .unwrap()
            .starts_with("W3sib3Ai")
    );
}

#[test]
fn composed_names_that_are_not_kubernetes_names_are_allowed_unchanged() {
    // Names sent as they are: tests/webhook/test_adversarial.py, over HTTPS. A child tenant whose composed namespace would be longer than a namespace can be.
    let long = format!("tenant-{}", "a".repeat(50));
    let labels = json!({"apps.cozystack.io/application.kind": "Tenant"});
    let req = mk_review(
        "CREATE",
        &long,
        mk_hr(&long, "tenant-bbbbbbbbbb", Some(labels)),
    );
    assert_eq!(reason(&req), Reason::InvalidName);
    // generateName: the name is still empty at mutating admission.
    let req = mk_review("CREATE", "tenant-foo", mk_hr("tenant-foo", "", None));
    assert_eq!(pending(&req).tenant, "tenant-foo");
}

#[test]
fn objects_nested_deeper_than_a_json_tree_parser_allows_are_admitted() {
    let depth = 10_000;
    let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"helm.toolkit.fluxcd.io","version":"v2","kind":"HelmRelease"}},"operation":"CREATE","namespace":"tenant-foo","object":{{"metadata":{{"name":"deep","namespace":"tenant-foo"}},"spec":{{"values":{{"x":{deep}}}}}}},"oldObject":{{"a":{deep}}}}}}}"#
    );
    let review = AdmissionReview::from_slice(body.as_bytes()).unwrap();
    assert_eq!(pending(&review.request).tenant, "tenant-foo");
}

/// Fuzzing AdmissionReview parsing: any body is a review or a 400, never a panic; any review of
/// a HelmRelease with readable metadata, however deep or odd the rest, is decided.
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 48, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn any_bytes_parse_or_fail_cleanly(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(review) = AdmissionReview::from_slice(&body) {
                let _ = admit(&review.request);
            }
        }

        #[test]
        fn any_object_is_decided(
            namespace in "tenant-[a-z0-9]{1,8}|[a-z./?-]{0,12}",
            name in "[a-z0-9.-]{0,20}|.{0,6}",
            object in json_value(),
            depth in 0usize..400,
        ) {
            let nested = (0..depth).fold(object.clone(), |v, _| json!([v]));
            let hr = json!({"metadata": {"name": name, "namespace": namespace}, "spec": {"values": nested}});
            let body = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u",
                    "kind": {"group": "helm.toolkit.fluxcd.io", "version": "v2", "kind": "HelmRelease"},
                    "operation": "CREATE",
                    "namespace": namespace,
                    "object": hr,
                    "oldObject": object,
                }
            });
            // serde_json's writer has no depth limit; its tree parser would stop at 128.
            let review = AdmissionReview::from_slice(&serde_json::to_vec(&body).unwrap());
            prop_assert!(review.is_ok(), "{:?}", review.err());
            match admit(&review.unwrap().request) {
                Admit::NeedsShard(p) => {
                    prop_assert!(names::is_dns_label(&p.tenant));
                    prop_assert!(namespace.starts_with("tenant-"));
                }
                Admit::Done(o) => prop_assert!(o.response.allowed && o.response.patch.is_none()),
            }
        }
    }
}
