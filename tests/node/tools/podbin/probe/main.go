// Command probe is the real node's test workload. `probe serve PORT` answers every HTTP request
// with its pod's hostname; `probe get URL` resolves the URL's host through the pod's resolv.conf
// (Go's own resolver: search domains and ndots as the kubelet wrote them), fetches the URL and
// writes what it saw (with the pod's resolv.conf) as JSON to stdout and to the termination log the kubelet reports in the
// pod's status, exiting non-zero when either step fails.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

type result struct {
	Resolv   string   `json:"resolv_conf"`
	Host     string   `json:"host"`
	Resolved []string `json:"resolved"`
	Status   int      `json:"status"`
	Body     string   `json:"body"`
	Error    string   `json:"error,omitempty"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: probe serve PORT | probe get URL")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2])
	case "get":
		os.Exit(get(os.Args[2]))
	default:
		fmt.Fprintf(os.Stderr, "probe: unknown mode %q (serve or get)\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(port string) {
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s", host) })
	srv := &http.Server{Addr: ":" + port, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}

func get(raw string) int {
	r := result{}
	defer report(&r)
	if conf, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		r.Resolv = string(conf)
	}
	u, err := url.Parse(raw)
	if err != nil {
		r.Error = err.Error()
		return 1
	}
	r.Host = u.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r.Resolved, err = net.DefaultResolver.LookupHost(ctx, r.Host); err != nil {
		r.Error = "resolve: " + err.Error()
		return 1
	}
	// A Service's endpoints and kube-proxy's rules trail its pod's Running phase by a sync or
	// two: a refused or unrouted connection is retried until the deadline, as real clients do.
	var resp *http.Response
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			r.Error = "get: " + err.Error()
			return 1
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	r.Status, r.Body = resp.StatusCode, string(body)
	if err != nil {
		r.Error = "read: " + err.Error()
		return 1
	}
	return 0
}

func report(r *result) {
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	// Best effort: outside a pod there is no termination log.
	_ = os.WriteFile("/dev/termination-log", out, 0o644)
}
