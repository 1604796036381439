//! HelmRelease → tenant attribution (docs/design.md §S2).
//!
//! The unit of placement is the tenant namespace. A tenant's own HelmRelease (the one with
//! `apps.cozystack.io/application.kind: Tenant`, named `tenant-<x>`) lives in its *parent*
//! namespace but is placed with the tenant it creates, so a parent and its children share a shard.
use std::collections::BTreeMap;

/// Prefix of every tenant namespace and of every tenant HelmRelease name.
pub const TENANT_PREFIX: &str = "tenant-";
/// The root tenant's namespace.
pub const ROOT_TENANT: &str = "tenant-root";
/// Label marking the HelmRelease that creates a tenant.
pub const APPLICATION_KIND_LABEL: &str = "apps.cozystack.io/application.kind";
/// Value of [`APPLICATION_KIND_LABEL`] on tenant HelmReleases.
pub const TENANT_KIND: &str = "Tenant";

/// The tenant namespace a HelmRelease belongs to, or `None` when it is not a tenant release
/// (its namespace does not start with `tenant-`).
pub fn tenant_namespace_for_hr(
    namespace: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    if !namespace.starts_with(TENANT_PREFIX) {
        return None;
    }
    let is_tenant_release = labels
        .get(APPLICATION_KIND_LABEL)
        .is_some_and(|kind| kind == TENANT_KIND);
    let child = name.strip_prefix(TENANT_PREFIX).filter(|x| !x.is_empty());
    match child {
        // In tenant-root the child's namespace is the release name itself (tenant-root/tenant-root
        // attributes to tenant-root); elsewhere tenants nest as <parent-ns>-<x>.
        Some(_) if is_tenant_release && namespace == ROOT_TENANT => Some(name.to_owned()),
        Some(x) if is_tenant_release => Some(format!("{namespace}-{x}")),
        _ => Some(namespace.to_owned()),
    }
}

/// Whether a namespace name can be a tenant namespace.
pub fn is_tenant_namespace(namespace: &str) -> bool {
    namespace.starts_with(TENANT_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant_kind() -> BTreeMap<String, String> {
        BTreeMap::from([(APPLICATION_KIND_LABEL.to_owned(), TENANT_KIND.to_owned())])
    }

    #[test]
    fn root_tenant_release_attributes_to_itself() {
        assert_eq!(
            tenant_namespace_for_hr("tenant-root", "tenant-root", &tenant_kind()).as_deref(),
            Some("tenant-root")
        );
    }

    #[test]
    fn child_of_root_is_tenant_name() {
        assert_eq!(
            tenant_namespace_for_hr("tenant-root", "tenant-foo", &tenant_kind()).as_deref(),
            Some("tenant-foo")
        );
    }

    #[test]
    fn nested_tenant_is_parent_dash_name() {
        assert_eq!(
            tenant_namespace_for_hr("tenant-foo", "tenant-bar", &tenant_kind()).as_deref(),
            Some("tenant-foo-bar")
        );
    }

    #[test]
    fn ordinary_release_belongs_to_its_namespace() {
        let none = BTreeMap::new();
        assert_eq!(
            tenant_namespace_for_hr("tenant-foo", "postgres-db", &none).as_deref(),
            Some("tenant-foo")
        );
        assert_eq!(
            tenant_namespace_for_hr("tenant-root", "etcd", &none).as_deref(),
            Some("tenant-root")
        );
        // Named like a tenant but not labelled as one: stays in its namespace.
        assert_eq!(
            tenant_namespace_for_hr("tenant-foo", "tenant-bar", &none).as_deref(),
            Some("tenant-foo")
        );
    }

    #[test]
    fn tenant_label_needs_a_tenant_name() {
        let kind = tenant_kind();
        assert_eq!(
            tenant_namespace_for_hr("tenant-foo", "tenant-", &kind).as_deref(),
            Some("tenant-foo")
        );
        assert_eq!(
            tenant_namespace_for_hr("tenant-foo", "kubernetes-x", &kind).as_deref(),
            Some("tenant-foo")
        );
        let other_kind =
            BTreeMap::from([(APPLICATION_KIND_LABEL.to_owned(), "Postgres".to_owned())]);
        assert_eq!(
            tenant_namespace_for_hr("tenant-root", "tenant-foo", &other_kind).as_deref(),
            Some("tenant-root")
        );
    }

    #[test]
    fn non_tenant_namespaces_are_excluded() {
        for ns in [
            "cozy-system",
            "cozy-fluxcd",
            "default",
            "tenant",
            "tenantroot",
            "my-tenant-x",
        ] {
            assert_eq!(
                tenant_namespace_for_hr(ns, "tenant-foo", &tenant_kind()),
                None,
                "{ns}"
            );
        }
        assert!(!is_tenant_namespace("cozy-system"));
        assert!(is_tenant_namespace("tenant-root"));
    }
}
