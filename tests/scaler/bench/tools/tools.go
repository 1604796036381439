//go:build tools

// Package tools pins the load generators of the benchmarks: ghz drives the scaler and its no-op
// gRPC stand-in, hey the webhook and its no-op HTTPS stand-in.
package tools

import (
	_ "github.com/bojand/ghz/cmd/ghz"
	_ "github.com/rakyll/hey"
)
