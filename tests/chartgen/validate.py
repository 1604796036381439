"""Schema validation of rendered objects.

Kubernetes kinds: kubernetes-validate in strict mode (unknown fields fail). KEDA, CNPG (Cluster, and
Pooler from the operator's manifests), Flux, RedisFailover, cert-manager and prometheus-operator kinds: the
upstream CRD openAPIV3Schema
(tests/lib/upstream.sh, pinned versions), and
this project's ScaleAdapter CRD (the package chart's crds/), made strict the same way (every
object schema that lists properties gets additionalProperties: false unless it preserves unknown
fields). Kinds whose CRDs are not available offline only get a structural check and are listed.
"""
import copy

from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from testkit import crd_files, upstream

K8S_VERSION = "1.33"
POOLER_CRD = upstream("cnpg-operator") / "postgresql.cnpg.io_poolers.yaml"
CRD_FILES = [*crd_files("keda", "cnpg", "helm-controller", "redis-operator", "cert-manager", "prometheus-operator"),
             POOLER_CRD,
             Path(__file__).resolve().parents[2] / "charts/cozy-autoscaling/crds/scaleadapters.yaml"]
# The VictoriaMetrics operator's module is not served by the module proxy: no CRD for it.
STRUCTURAL_ONLY = {
    ("operator.victoriametrics.com/v1beta1", "VMServiceScrape"),
}


def strictify(schema):
    if isinstance(schema, dict):
        schema = {k: strictify(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strictify(s) for s in schema]
    return schema


def apply_defaults(schema, obj):
    """What the API server does before validating a custom resource: fill absent fields that
    have a schema default (so an omitted CNPG `instances` becomes 1, as it would live)."""
    if isinstance(obj, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                apply_defaults(sub, obj[key])
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_defaults(schema["items"], item)
    return obj


def defaulted(obj):
    """A copy of `obj` with its CRD's defaults applied (unchanged for other kinds)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in CRDS:
        return copy.deepcopy(obj)
    return apply_defaults(CRDS[key].schema, copy.deepcopy(obj))


def _load_crds():
    out = {}
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            schema = copy.deepcopy(v["schema"]["openAPIV3Schema"])
            # The API server accepts these on every custom resource, listed or not (kube-derive's
            # ScaleAdapter schema does not list them).
            for key, type_ in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
                schema.setdefault("properties", {}).setdefault(
                    key, {"type": type_, "x-kubernetes-preserve-unknown-fields": True})
            schema = strictify(schema)
            out[(f"{group}/{v['name']}", kind)] = jsonschema.Draft7Validator(schema)
    if not out:
        raise RuntimeError("no upstream CRDs found: run tests/lib/setup.sh")
    return out


CRDS = _load_crds()


def validate(obj):
    """Raises AssertionError naming the object and the first schema error."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    name = f"{key[1]}/{obj.get('metadata', {}).get('name')}"
    if key in CRDS:
        errors = sorted(CRDS[key].iter_errors(defaulted(obj)), key=lambda e: list(e.path))
        assert not errors, f"{name}: {'.'.join(map(str, errors[0].path))}: {errors[0].message}"
    elif key in STRUCTURAL_ONLY:
        assert isinstance(obj.get("metadata", {}).get("name"), str), f"{name}: metadata.name missing"
        assert isinstance(obj.get("spec"), dict), f"{name}: spec missing"
    else:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.caught.path)
            raise AssertionError(f"{name}: {path}: {e.caught.message}") from None
        except kubernetes_validate.SchemaNotFoundError:
            raise AssertionError(f"{name}: no schema for {key}; add its CRD or list it") from None


def validate_all(objs):
    for o in objs:
        validate(o)
