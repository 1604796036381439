// Checks a Grafana dashboard JSON against Grafana's own dashboard model (the Foundation SDK, pinned
// here): tests/chartgen/setup.sh builds it, tests/chartgen/test_dashboard.py runs it.
module cozy-autoscaling/tests/chartgen/grafana-check

go 1.24

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
