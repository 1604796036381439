// Command grafana-check decodes a dashboard JSON file strictly with Grafana's Foundation SDK
// (required fields present, types right, no unknown field, panel options and Prometheus queries
// checked by their plugins' models) and validates it. Exit 0: valid; 1: invalid (every problem on
// stderr); 2: unreadable.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// failed tells a real error from the typed-nil cog.BuildErrors the SDK returns as a non-nil
// error when every field decoded.
func failed(err error) bool {
	var build cog.BuildErrors
	if errors.As(err, &build) {
		return len(build) > 0
	}
	return err != nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: grafana-check DASHBOARD.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	if err := d.UnmarshalJSONStrict(raw); failed(err) {
		fmt.Fprintln(os.Stderr, "not a valid dashboard:", err)
		os.Exit(1)
	}
	if err := d.Validate(); failed(err) {
		fmt.Fprintln(os.Stderr, "dashboard fails validation:", err)
		os.Exit(1)
	}
	fmt.Printf("ok: %d panels\n", len(d.Panels))
}
