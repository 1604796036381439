"""Metrics text (OpenMetrics from our binaries, Prometheus text from VictoriaMetrics and the CNPG
series generators), parsed by the prometheus_client library and flattened for assertions."""
from prometheus_client import parser
from prometheus_client.openmetrics import parser as openmetrics_parser
import requests

Sample = tuple[str, dict, float]


def parse(text: str) -> list[Sample]:
    """-> [(sample name, {label: value}, value)]; OpenMetrics when the text ends with `# EOF`."""
    strict = text.rstrip().endswith("# EOF")
    families = (openmetrics_parser if strict else parser).text_string_to_metric_families(text)
    return [(s.name, dict(s.labels), float(s.value)) for family in families for s in family.samples]


def scrape(url: str, timeout: float = 5) -> list[Sample]:
    """Parsed samples of a /metrics page."""
    r = requests.get(url, timeout=timeout)
    r.raise_for_status()
    return parse(r.text)


def select(samples: list[Sample], name: str, **labels) -> list[tuple[dict, float]]:
    """Samples of metric `name` whose labels include `labels`."""
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def total(samples: list[Sample], name: str, **labels) -> float:
    return sum(v for _, v in select(samples, name, **labels))
