use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn mk_release(index: &mut Index, ns: &str, name: &str, key: Option<&str>) {
    let l = match key {
        Some(k) => labels(&[(SHARD_KEY_LABEL, k)]),
        None => labels(&[]),
    };
    index.apply_release(ns, name, Release::new(ns, name, &l));
}

fn mk_namespace(index: &mut Index, name: &str, shard: Option<&str>) {
    let l = match shard {
        Some(s) => labels(&[(NAMESPACE_SHARD_LABEL, s)]),
        None => labels(&[]),
    };
    index.apply_namespace(name, TenantNamespace::new(&l, false));
}

fn cfg(k: u32) -> PlacementConfig {
    PlacementConfig {
        shard_count: k,
        ..PlacementConfig::default()
    }
}

fn info<'a>(tenants: &'a [TenantInfo], ns: &str) -> &'a TenantInfo {
    tenants.iter().find(|t| t.namespace == ns).unwrap()
}

#[test]
fn weights_count_attributed_releases_and_skip_others() {
    let mut index = Index::default();
    mk_release(&mut index, "tenant-a", "pg", Some("shard0"));
    mk_release(&mut index, "tenant-a", "redis", Some("shard0"));
    let parent = labels(&[("apps.cozystack.io/application.kind", "Tenant")]);
    index.apply_release(
        "tenant-root",
        "tenant-a",
        Release::new("tenant-root", "tenant-a", &parent),
    );
    mk_release(&mut index, "cozy-system", "cilium", None);
    let tenants = index.tenants();
    assert_eq!(tenants.len(), 1);
    assert_eq!(info(&tenants, "tenant-a").weight, 3);
    assert_eq!(
        index.totals(),
        Totals {
            tenants: 1,
            tenant_releases: 3,
            keyed_releases: 2
        }
    );
    index.delete_release("tenant-a", "pg");
    assert_eq!(info(&index.tenants(), "tenant-a").weight, 2);
}

#[test]
fn current_prefers_namespace_label_then_release_majority() {
    let mut index = Index::default();
    mk_release(&mut index, "tenant-a", "x", Some("shard1"));
    mk_release(&mut index, "tenant-a", "y", Some("shard2"));
    mk_release(&mut index, "tenant-a", "z", Some("shard2"));
    mk_release(&mut index, "tenant-a", "w", Some("tenants"));
    assert_eq!(info(&index.tenants(), "tenant-a").current, Some(2));
    mk_namespace(&mut index, "tenant-a", Some("shard1"));
    assert_eq!(info(&index.tenants(), "tenant-a").current, Some(1));
    // A non-canonical label falls back to the releases.
    mk_namespace(&mut index, "tenant-a", Some("shard01"));
    assert_eq!(info(&index.tenants(), "tenant-a").current, Some(2));
}

#[test]
fn majority_ties_go_to_the_lowest_index() {
    let mut index = Index::default();
    mk_release(&mut index, "tenant-a", "x", Some("shard3"));
    mk_release(&mut index, "tenant-a", "y", Some("shard1"));
    assert_eq!(info(&index.tenants(), "tenant-a").current, Some(1));
}

#[test]
fn recorded_shard_must_be_canonical_and_below_k() {
    let mut index = Index::default();
    mk_namespace(&mut index, "tenant-a", Some("shard1"));
    mk_namespace(&mut index, "tenant-b", Some("shard01"));
    mk_namespace(&mut index, "tenant-c", Some("shard5"));
    assert_eq!(index.recorded_shard("tenant-a", 2), Some(1));
    assert_eq!(index.recorded_shard("tenant-a", 1), None);
    assert_eq!(index.recorded_shard("tenant-b", 4), None);
    assert_eq!(index.recorded_shard("tenant-c", 4), None);
    assert_eq!(index.recorded_shard("tenant-zzz", 4), None);
}

#[test]
fn non_tenant_namespaces_are_ignored() {
    let mut index = Index::default();
    mk_namespace(&mut index, "cozy-system", Some("shard1"));
    assert!(index.tenants().is_empty());
}

#[test]
fn new_tenant_goes_to_least_loaded_ready_shard() {
    let mut index = Index::default();
    for i in 0..5 {
        mk_release(&mut index, "tenant-a", &format!("a{i}"), Some("shard0"));
    }
    mk_release(&mut index, "tenant-b", "b", Some("shard1"));
    mk_namespace(&mut index, "tenant-a", Some("shard0"));
    mk_namespace(&mut index, "tenant-b", Some("shard1"));
    assert_eq!(index.place("tenant-new", &cfg(3)), Some(2));
    let unready = PlacementConfig {
        unready: BTreeSet::from([2]),
        ..cfg(3)
    };
    assert_eq!(index.place("tenant-new", &unready), Some(1));
    let none_ready = PlacementConfig {
        unready: BTreeSet::from([0, 1, 2]),
        ..cfg(3)
    };
    assert_eq!(index.place("tenant-new", &none_ready), None);
}

#[test]
fn unlabelled_tenant_adopts_its_releases_majority() {
    // The parent Tenant release was stamped before the namespace existed.
    let mut index = Index::default();
    mk_release(&mut index, "tenant-a", "a", Some("shard0"));
    let parent = labels(&[
        ("apps.cozystack.io/application.kind", "Tenant"),
        (SHARD_KEY_LABEL, "shard0"),
    ]);
    index.apply_release(
        "tenant-root",
        "tenant-b",
        Release::new("tenant-root", "tenant-b", &parent),
    );
    assert_eq!(index.place("tenant-b", &cfg(2)), Some(0));
}

#[test]
fn burst_of_new_tenants_spreads() {
    let mut index = Index::default();
    let mut seen = BTreeSet::new();
    for t in ["tenant-a", "tenant-b", "tenant-c"] {
        let shard = index.place(t, &cfg(3)).unwrap();
        index.record_label(t, shard);
        seen.insert(shard);
    }
    assert_eq!(seen, BTreeSet::from([0, 1, 2]));
}

#[test]
fn readiness_comes_from_shard_deployments() {
    let mut index = Index::default();
    assert_eq!(index.unready_shards(2), BTreeSet::from([0, 1]));
    index.apply_deployment(1, true);
    index.apply_deployment(0, false);
    assert_eq!(index.unready_shards(2), BTreeSet::from([0]));
    index.delete_deployment(1);
    assert_eq!(index.unready_shards(2), BTreeSet::from([0, 1]));
}

#[test]
fn placement_loads_for_gauges() {
    let mut index = Index::default();
    mk_release(&mut index, "tenant-a", "a1", Some("shard1"));
    mk_release(&mut index, "tenant-a", "a2", Some("shard1"));
    mk_release(&mut index, "tenant-b", "b1", None);
    assert_eq!(index.placement(&cfg(2)).loads, vec![1, 2]);
}
