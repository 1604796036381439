// Command burst asks a KEDA external scaler for every ScaledObject's metric at one instant, as
// KEDA's scale loops do when they all start together: one goroutine per call, each with its own
// deadline from the instant it asks, over the connections grpc-go holds (a call waiting for one of
// the server's HTTP/2 streams waits inside its deadline, as KEDA's would). ghz cannot do this at
// 50,000 (one worker per call breaks its own connections), hence this client (issue 42).
//
//	burst -addr 127.0.0.1:6000 -data requests.json -connections 1 -deadline 3s
//
// The data file is the benchmarks' ghz request list (GetMetricsRequest in proto JSON). Prints one
// JSON summary: status codes, latency quantiles, wall time.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const getMetrics = "/externalscaler.ExternalScaler/GetMetrics"

type request struct {
	ScaledObjectRef struct {
		Name           string            `json:"name"`
		Namespace      string            `json:"namespace"`
		ScalerMetadata map[string]string `json:"scalerMetadata"`
	} `json:"scaledObjectRef"`
	MetricName string `json:"metricName"`
}

// encode writes GetMetricsRequest's wire form (externalscaler.proto's field numbers).
func encode(r request) []byte {
	var ref []byte
	ref = protowire.AppendTag(ref, 1, protowire.BytesType)
	ref = protowire.AppendString(ref, r.ScaledObjectRef.Name)
	ref = protowire.AppendTag(ref, 2, protowire.BytesType)
	ref = protowire.AppendString(ref, r.ScaledObjectRef.Namespace)
	for k, v := range r.ScaledObjectRef.ScalerMetadata {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, k)
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, v)
		ref = protowire.AppendTag(ref, 3, protowire.BytesType)
		ref = protowire.AppendBytes(ref, entry)
	}
	var out []byte
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendBytes(out, ref)
	out = protowire.AppendTag(out, 2, protowire.BytesType)
	return protowire.AppendString(out, r.MetricName)
}

// raw passes pre-encoded messages through: the client needs no generated code.
type raw struct{}

func (raw) Name() string { return "proto" }

func (raw) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (raw) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

type result struct {
	code    string
	latency time.Duration
}

func main() {
	addr := flag.String("addr", "", "the scaler's host:port (plaintext)")
	data := flag.String("data", "", "JSON list of GetMetricsRequest (the benchmarks' ghz data file)")
	connections := flag.Int("connections", 1, "connections the calls are spread over, round-robin")
	deadline := flag.Duration("deadline", 3*time.Second, "each call's deadline, from the instant it asks")
	flag.Parse()
	if *addr == "" || *data == "" || *connections < 1 {
		flag.Usage()
		os.Exit(2)
	}
	text, err := os.ReadFile(*data)
	if err != nil {
		log.Fatal(err)
	}
	var requests []request
	if err := json.Unmarshal(text, &requests); err != nil {
		log.Fatalf("%s: %v", *data, err)
	}
	messages := make([][]byte, len(requests))
	for i, r := range requests {
		messages[i] = encode(r)
	}

	conns := make([]*grpc.ClientConn, *connections)
	for i := range conns {
		conns[i], err = grpc.Dial(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{})))
		if err != nil {
			log.Fatal(err)
		}
		defer conns[i].Close()
		// Connected before the burst, so the first calls do not time the dial.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for conns[i].Connect(); conns[i].GetState() != connectivity.Ready; {
			if !conns[i].WaitForStateChange(ctx, conns[i].GetState()) {
				log.Fatalf("connection %d to %s not ready in 10 s", i, *addr)
			}
		}
		cancel()
	}

	results := make([]result, len(messages))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range messages {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), *deadline)
			defer cancel()
			var reply []byte
			err := conns[i%len(conns)].Invoke(ctx, getMetrics, &messages[i], &reply)
			results[i] = result{status.Code(err).String(), time.Since(began)}
		}(i)
	}
	began := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(began)

	codes := map[string]int{}
	latencies := make([]float64, 0, len(results))
	for _, r := range results {
		codes[r.code]++
		if r.code == "OK" {
			latencies = append(latencies, r.latency.Seconds())
		}
	}
	sort.Float64s(latencies)
	quantile := func(q float64) any {
		if len(latencies) == 0 {
			return nil
		}
		return round(latencies[int(q*float64(len(latencies)-1))])
	}
	out, _ := json.Marshal(map[string]any{
		"calls": len(results), "codes": codes, "wall_s": round(wall.Seconds()),
		"ok_p50_s": quantile(0.5), "ok_p99_s": quantile(0.99), "ok_max_s": quantile(1),
	})
	fmt.Println(string(out))
}

func round(s float64) float64 { return float64(int64(s*1000+0.5)) / 1000 }
