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


def scrape(url: str, timeout: float = 5, families: tuple[str, ...] = ()) -> list[Sample]:
    """Parsed samples of a /metrics page; with `families`, of those metric families only (a
    scaler holding thousands of ScaledObjects serves a page that takes a second to parse whole)."""
    r = requests.get(url, timeout=timeout)
    r.raise_for_status()
    return parse(only(r.text, families) if families else r.text)


def only(text: str, families: tuple[str, ...]) -> str:
    """The lines of `text` that belong to `families` (their samples and comments), and `# EOF`."""
    def family_of(line: str) -> str:
        if line.startswith("# "):
            return line.split(" ", 3)[2] if line.count(" ") >= 2 else ""
        return line.split("{", 1)[0].split(" ", 1)[0]

    def kept(line: str) -> bool:
        name = family_of(line)
        return line == "# EOF" or any(
            name == f or (name.startswith(f + "_") and name[len(f) + 1:] in SUFFIXES) for f in families)

    return "".join(line + "\n" for line in text.splitlines() if kept(line))


# What a family's samples append to its name (counters, histograms, summaries, info).
SUFFIXES = {"total", "created", "count", "sum", "bucket", "info"}


def select(samples: list[Sample], name: str, **labels) -> list[tuple[dict, float]]:
    """Samples of metric `name` whose labels include `labels`."""
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def total(samples: list[Sample], name: str, **labels) -> float:
    return sum(v for _, v in select(samples, name, **labels))
