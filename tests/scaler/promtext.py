"""A small parser of the Prometheus / OpenMetrics text exposition (enough for assertions)."""


def parse(text: str) -> list[tuple[str, dict, float]]:
    """-> [(name, {label: value}, value)], comments and `# EOF` skipped."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, labels = head, {}
        if "{" in head:
            name, _, rest = head.partition("{")
            for part in _split_labels(rest.rstrip("}")):
                k, _, v = part.partition("=")
                labels[k.strip()] = v.strip('"')
        try:
            out.append((name, labels, float(value)))
        except ValueError:
            pass
    return out


def select(samples, name: str, **labels) -> list[tuple[dict, float]]:
    """Samples of metric `name` whose labels include `labels`."""
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def total(samples, name: str, **labels) -> float:
    return sum(v for _, v in select(samples, name, **labels))


def _split_labels(s: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in s:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts
