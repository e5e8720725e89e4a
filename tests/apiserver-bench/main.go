// apiserver-bench: the load client of scripts/bench-apiserver.sh (docs/apiserver-benchmark.md).
//
// It creates TaskRuns (or a TaskRun's Pods) through a real kube-apiserver the way client-go
// does: N goroutines share ONE HTTP/2 connection (the transport is limited to one connection
// and the run fails if a second one is dialled). Standard library only, so it builds offline
// from the Go toolchain.
//
//	apiserver-bench probe --body taskrun.json --expect expect.json --webhook-calls 2 ...
//	    dry-run CREATEs until the answer is right `--need` times in a row: the object as
//	    expected, the apiserver's webhook-call counter and (optionally) the serving process's
//	    own request counter moved by the expected amounts per CREATE. With --denied-by NAME
//	    the answer must instead be a refusal by the webhook NAME (a tampered object).
//	apiserver-bench run --body taskrun.json --expect expect.json --concurrency 8 ...
//	    one measured cell: warm-up (not recorded), metrics and CPU snapshot, measured load
//	    (closed loop with --concurrency, or open loop at --rate per second), snapshot, then
//	    every TaskRun created in the cell (warm-up included) is listed and checked against the
//	    expectation, its stored size read from etcd, and all of them deleted. Appends one JSON
//	    line to --out.
//
// The body is a TaskRun (tekton.dev/v1 or v1beta1) or a Pod (v1). Connection flags: --server,
// --ca, --token, --namespace; --as USER sends the CREATEs (of the load and of the probe) as
// USER (impersonation; listing, checking and deleting stay the token's), as Tekton's
// controller creates a TaskRun's Pods; --no-warnings counts an answer with a Warning header
// as failed. See --help of each subcommand.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const cellLabel = "bench.bookend.dev/cell"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: apiserver-bench probe|run [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "probe":
		err = probe(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiserver-bench:", err)
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------------------------------
// The API client: one HTTP/2 connection, bearer token.

type client struct {
	base  string
	token string
	// Impersonated user of the CREATEs (`Impersonate-User`), "" for the token's own.
	as    string
	http  *http.Client
	dials atomic.Int64
}

type common struct {
	server, ca, token, namespace, as string
	noWarnings                       bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", "", "kube-apiserver URL (https://127.0.0.1:PORT)")
	fs.StringVar(&c.ca, "ca", "", "PEM file of the apiserver's CA")
	fs.StringVar(&c.token, "token", os.Getenv("E2E_TOKEN"), "bearer token (default $E2E_TOKEN)")
	fs.StringVar(&c.namespace, "namespace", "team-a", "namespace of the objects")
	fs.StringVar(&c.as, "as", "", "user the CREATEs are sent as (impersonation), e.g. Tekton's controller")
	fs.BoolVar(&c.noWarnings, "no-warnings", false, "an answer to a CREATE with a Warning header is a failure")
}

func (c *common) client() (*client, error) {
	pem, err := os.ReadFile(c.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", c.ca)
	}
	cl := &client{base: strings.TrimRight(c.server, "/"), token: c.token, as: c.as}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		// One connection for everything, as client-go shares one per host: when its streams
		// are all in use, requests wait for one instead of dialling a second connection.
		MaxConnsPerHost:     1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     10 * time.Minute,
		// When the apiserver's concurrent-stream limit is reached, wait for a stream rather
		// than open a second connection.
		HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cl.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
	}
	cl.http = &http.Client{Transport: transport, Timeout: 120 * time.Second}
	return cl, nil
}

func (c *client) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	status, _, data, err := c.request(ctx, method, path, body, "")
	return status, data, err
}

// create: a POST as the impersonated user (if any); also the answer's warnings.
func (c *client) create(ctx context.Context, path string, body []byte) (int, []string, []byte, error) {
	return c.request(ctx, "POST", path, body, c.as)
}

func (c *client) request(ctx context.Context, method, path string, body []byte, as string) (int, []string, []byte, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if as != "" {
		req.Header.Set("Impersonate-User", as)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	warnings := resp.Header.Values("Warning")
	if err != nil {
		return resp.StatusCode, warnings, nil, err
	}
	if resp.ProtoMajor != 2 {
		return resp.StatusCode, warnings, data, fmt.Errorf("the apiserver answered over HTTP/%d.%d, not HTTP/2", resp.ProtoMajor, resp.ProtoMinor)
	}
	return resp.StatusCode, warnings, data, nil
}

// ---------------------------------------------------------------------------------------------
// The body (a TaskRun or a Pod) and what the stored object must look like.

type body struct {
	json       []byte
	apiVersion string
	// The resource: "taskruns" or "pods".
	resource string
}

// loadBody reads a TaskRun or a Pod (JSON) and sets the cell label on it.
func loadBody(path, cell string) (*body, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	delete(meta, "namespace")
	if cell != "" {
		labels, _ := meta["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
			meta["labels"] = labels
		}
		labels[cellLabel] = cell
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	var resource string
	switch {
	case kind == "TaskRun" && strings.HasPrefix(apiVersion, "tekton.dev/"):
		resource = "taskruns"
	case kind == "Pod" && apiVersion == "v1":
		resource = "pods"
	default:
		return nil, fmt.Errorf("%s: %s %s is neither a tekton.dev TaskRun nor a v1 Pod", path, apiVersion, kind)
	}
	return &body{json: out, apiVersion: apiVersion, resource: resource}, nil
}

// group: the API group ("" for the core group).
func (b *body) group() string {
	if group, _, ok := strings.Cut(b.apiVersion, "/"); ok {
		return group
	}
	return ""
}

func (b *body) collection(namespace string) string {
	if b.group() == "" {
		return fmt.Sprintf("/api/%s/namespaces/%s/%s", b.apiVersion, namespace, b.resource)
	}
	return fmt.Sprintf("/apis/%s/namespaces/%s/%s", b.apiVersion, namespace, b.resource)
}

// etcdKey: where the apiserver stores the object (its default prefixes).
func (b *body) etcdKey(namespace, name string) string {
	if b.group() == "" {
		return fmt.Sprintf("/registry/%s/%s/%s", b.resource, namespace, name)
	}
	return fmt.Sprintf("/registry/%s/%s/%s/%s", b.group(), b.resource, namespace, name)
}

// expectation: what every created TaskRun must be. Absent members are not checked.
type expectation struct {
	// The whole spec, compared as JSON values.
	Spec any `json:"spec"`
	// metadata.annotations exactly (an empty object: none at all).
	Annotations map[string]string `json:"annotations"`
	// The step names in order (a TaskRun).
	Steps []string `json:"steps"`
	// spec.containers' names in order (a Pod).
	Containers []string `json:"containers"`
	// metadata.labels that must be there with these values (others may be).
	Labels map[string]string `json:"labels"`
}

func loadExpectation(path string) (*expectation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e expectation
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &e, nil
}

// check says what is wrong with a created object ("" when nothing is).
func (e *expectation) check(object map[string]any) string {
	spec := object["spec"]
	if e.Spec != nil && !reflect.DeepEqual(spec, e.Spec) {
		got, _ := json.Marshal(spec)
		return "spec differs: " + truncate(string(got), 300)
	}
	if e.Annotations != nil {
		meta, _ := object["metadata"].(map[string]any)
		got := map[string]string{}
		if a, ok := meta["annotations"].(map[string]any); ok {
			for k, v := range a {
				s, _ := v.(string)
				got[k] = s
			}
		}
		if !reflect.DeepEqual(got, e.Annotations) {
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return fmt.Sprintf("annotations differ: got keys %v", keys)
		}
	}
	if e.Steps != nil {
		var names []string
		if s, ok := spec.(map[string]any); ok {
			if ts, ok := s["taskSpec"].(map[string]any); ok {
				steps, _ := ts["steps"].([]any)
				for _, st := range steps {
					m, _ := st.(map[string]any)
					n, _ := m["name"].(string)
					names = append(names, n)
				}
			}
		}
		if !reflect.DeepEqual(names, e.Steps) {
			return fmt.Sprintf("steps %v, want %v", names, e.Steps)
		}
	}
	if e.Containers != nil {
		var names []string
		if s, ok := spec.(map[string]any); ok {
			containers, _ := s["containers"].([]any)
			for _, c := range containers {
				m, _ := c.(map[string]any)
				n, _ := m["name"].(string)
				names = append(names, n)
			}
		}
		if !reflect.DeepEqual(names, e.Containers) {
			return fmt.Sprintf("containers %v, want %v", names, e.Containers)
		}
	}
	if e.Labels != nil {
		meta, _ := object["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		for k, want := range e.Labels {
			if got, _ := labels[k].(string); got != want {
				return fmt.Sprintf("label %s=%q, want %q", k, got, want)
			}
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ---------------------------------------------------------------------------------------------
// Prometheus text: the series of a few families, and their differences.

var apiserverFamilies = []string{
	"apiserver_admission_webhook_admission_duration_seconds_",
	"apiserver_admission_step_admission_duration_seconds_",
	"apiserver_admission_controller_admission_duration_seconds_",
	"apiserver_request_duration_seconds_",
	"apiserver_request_sli_duration_seconds_",
	"etcd_request_duration_seconds_",
	"apiserver_mutating_admission_policy_",
	"apiserver_admission_webhook_request_total",
	"apiserver_admission_webhook_rejection_count",
}

type series map[string]float64

// parseMetrics keeps the `_sum`, `_count` and `_total` series (not buckets) of the families
// whose names start with one of `prefixes` (all families when empty).
func parseMetrics(text []byte, prefixes []string) series {
	out := series{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		key, val := line[:sp], line[sp+1:]
		name := key
		if i := strings.IndexByte(key, '{'); i >= 0 {
			name = key[:i]
		}
		if !(strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_total")) {
			continue
		}
		if len(prefixes) > 0 {
			match := false
			for _, p := range prefixes {
				if strings.HasPrefix(name, p) {
					match = true
					break
				}
			}
			if !match {
				continue
			}
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		out[key] = v
	}
	return out
}

// sum of every series whose name is `name` and whose labels contain all of `having`.
func (s series) sum(name string, having ...string) float64 {
	total := 0.0
	for key, v := range s {
		n, labels := splitKey(key)
		if n != name {
			continue
		}
		ok := true
		for _, h := range having {
			if !strings.Contains(labels, h) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

func splitKey(key string) (string, string) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		return key[:i], key[i:]
	}
	return key, ""
}

// parseLabels reads `{a="x",b="y"}`.
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		name := strings.TrimLeft(s[:eq], ", ")
		var val strings.Builder
		i := eq + 2
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
			} else {
				val.WriteByte(s[i])
			}
			i++
		}
		out[name] = val.String()
		s = s[min(i+1, len(s)):]
	}
	return out
}

// A histogram's (or counter's) change over the measured window.
type metricDelta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Count  float64           `json:"count"`
	Sum    float64           `json:"sum,omitempty"`
}

// deltas pairs `_sum` with `_count` (histograms) and keeps `_total` counters; only series
// that moved.
func deltas(before, after series) []metricDelta {
	type acc struct {
		name, labels string
		count, sum   float64
		seen         bool
	}
	byKey := map[string]*acc{}
	for key, v := range after {
		d := v - before[key]
		name, labels := splitKey(key)
		var base string
		isSum := false
		switch {
		case strings.HasSuffix(name, "_count"):
			base = strings.TrimSuffix(name, "_count")
		case strings.HasSuffix(name, "_sum"):
			base = strings.TrimSuffix(name, "_sum")
			isSum = true
		default:
			base = name
		}
		k := base + labels
		a := byKey[k]
		if a == nil {
			a = &acc{name: base, labels: labels}
			byKey[k] = a
		}
		if isSum {
			a.sum = d
		} else {
			a.count = d
			a.seen = true
		}
	}
	var out []metricDelta
	for _, a := range byKey {
		if !a.seen || a.count <= 0 {
			continue
		}
		out = append(out, metricDelta{Name: a.name, Labels: parseLabels(a.labels), Count: a.count, Sum: a.sum})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return fmt.Sprint(out[i].Labels) < fmt.Sprint(out[j].Labels)
	})
	return out
}

func (c *client) apiserverMetrics(ctx context.Context) (series, error) {
	status, data, err := c.do(ctx, "GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if status != 200 {
		return nil, fmt.Errorf("GET /metrics: HTTP %d", status)
	}
	return parseMetrics(data, apiserverFamilies), nil
}

// plainMetrics scrapes a process's own /metrics over plain HTTP (bookend's admin port, the null
// webhook's).
func plainMetrics(ctx context.Context, url string) (series, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return parseMetrics(data, nil), nil
}

func webhookCalls(s series) float64 {
	return s.sum("apiserver_admission_webhook_admission_duration_seconds_count", `operation="CREATE"`)
}

// ---------------------------------------------------------------------------------------------
// probe

func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	var c common
	c.register(fs)
	bodyPath := fs.String("body", "", "TaskRun or Pod (JSON) to dry-run create")
	expectPath := fs.String("expect", "", "expectation (JSON: spec, annotations, steps, containers, labels)")
	deniedBy := fs.String("denied-by", "", "instead: the answer must be a refusal by this webhook")
	calls := fs.Float64("webhook-calls", -1, "apiserver webhook calls per CREATE (-1: not checked)")
	counterURL := fs.String("counter-url", "", "plain-HTTP /metrics of the serving process")
	counterName := fs.String("counter", "", "series name summed at --counter-url")
	counterDelta := fs.Float64("counter-delta", 2, "how much --counter must move per CREATE")
	need := fs.Int("need", 3, "consecutive right answers")
	timeout := fs.Duration("timeout", 90*time.Second, "give up after")
	_ = fs.Parse(args)
	cl, err := c.client()
	if err != nil {
		return err
	}
	b, err := loadBody(*bodyPath, "probe")
	if err != nil {
		return err
	}
	exp := &expectation{}
	if *expectPath != "" {
		if exp, err = loadExpectation(*expectPath); err != nil {
			return err
		}
	} else if *deniedBy == "" {
		return errors.New("give --expect or --denied-by")
	}
	ctx := context.Background()
	deadline := time.Now().Add(*timeout)
	streak, attempts := 0, 0
	last := ""
	for streak < *need {
		if time.Now().After(deadline) {
			return fmt.Errorf("probe: not right %d times in a row within %v (%d attempts); last: %s", *need, *timeout, attempts, last)
		}
		attempts++
		problem, err := probeOnce(ctx, cl, &c, b, exp, *deniedBy, *calls, *counterURL, *counterName, *counterDelta)
		if err != nil {
			problem = err.Error()
		}
		if problem == "" {
			streak++
			continue
		}
		streak, last = 0, problem
		time.Sleep(300 * time.Millisecond)
	}
	fmt.Printf("probe: right %d times in a row after %d dry-run CREATEs\n", *need, attempts)
	return nil
}

func probeOnce(ctx context.Context, cl *client, c *common, b *body, exp *expectation, deniedBy string, calls float64, counterURL, counterName string, counterDelta float64) (string, error) {
	before, err := cl.apiserverMetrics(ctx)
	if err != nil {
		return "", err
	}
	var counterBefore series
	if counterURL != "" {
		if counterBefore, err = plainMetrics(ctx, counterURL); err != nil {
			return "", err
		}
	}
	status, warnings, data, err := cl.create(ctx, b.collection(c.namespace)+"?dryRun=All", b.json)
	if err != nil {
		return "", err
	}
	if deniedBy != "" {
		var answer struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &answer)
		if status == 201 || !strings.Contains(answer.Message, `"`+deniedBy+`" denied`) {
			return fmt.Sprintf("not refused by %s: HTTP %d: %s", deniedBy, status, truncate(string(data), 300)), nil
		}
	} else {
		if status != 201 {
			return fmt.Sprintf("HTTP %d: %s", status, truncate(string(data), 300)), nil
		}
		if c.noWarnings && len(warnings) > 0 {
			return fmt.Sprintf("admitted with warnings: %s", truncate(strings.Join(warnings, "; "), 300)), nil
		}
		var object map[string]any
		if err := json.Unmarshal(data, &object); err != nil {
			return "", err
		}
		if problem := exp.check(object); problem != "" {
			return problem, nil
		}
	}
	after, err := cl.apiserverMetrics(ctx)
	if err != nil {
		return "", err
	}
	if calls >= 0 {
		if got := webhookCalls(after) - webhookCalls(before); got != calls {
			return fmt.Sprintf("%v webhook calls, want %v", got, calls), nil
		}
	}
	if counterURL != "" {
		counterAfter, err := plainMetrics(ctx, counterURL)
		if err != nil {
			return "", err
		}
		if got := counterAfter.sum(counterName) - counterBefore.sum(counterName); got != counterDelta {
			return fmt.Sprintf("%s moved by %v, want %v", counterName, got, counterDelta), nil
		}
	}
	return "", nil
}

// ---------------------------------------------------------------------------------------------
// run: one measured cell

type loadResult struct {
	Requests  int
	Errors    int
	Dropped   int
	Samples   []string
	Latencies []time.Duration
	Elapsed   time.Duration
}

func (r *loadResult) fail(msg string) {
	r.Errors++
	if len(r.Samples) < 5 {
		r.Samples = append(r.Samples, msg)
	}
}

// createOnce: "" when the object was created (and, with noWarnings, answered without a
// warning), else what went wrong.
func createOnce(ctx context.Context, cl *client, path string, b []byte, noWarnings bool) string {
	status, warnings, data, err := cl.create(ctx, path, b)
	if err != nil {
		return err.Error()
	}
	if status != 201 {
		return fmt.Sprintf("HTTP %d: %s", status, truncate(string(data), 200))
	}
	if noWarnings && len(warnings) > 0 {
		return "created with warnings: " + truncate(strings.Join(warnings, "; "), 200)
	}
	return ""
}

// closedLoop: `n` creators, each sending its next CREATE when the previous one is answered.
func closedLoop(ctx context.Context, cl *client, path string, b []byte, noWarnings bool, n int, d time.Duration) *loadResult {
	res := &loadResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var errs []string
			for time.Now().Before(end) {
				t0 := time.Now()
				problem := createOnce(ctx, cl, path, b, noWarnings)
				if problem == "" {
					lat = append(lat, time.Since(t0))
				} else {
					errs = append(errs, problem)
				}
			}
			mu.Lock()
			res.Latencies = append(res.Latencies, lat...)
			for _, e := range errs {
				res.fail(e)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Requests = len(res.Latencies) + res.Errors
	return res
}

// openLoop: CREATEs sent at a fixed rate whatever the answers; latency counted from the moment
// each was due (no coordinated omission). At most `maxInFlight` outstanding; beyond that a
// request is dropped and counted as an error.
func openLoop(ctx context.Context, cl *client, path string, b []byte, noWarnings bool, rate float64, d time.Duration, maxInFlight int) *loadResult {
	res := &loadResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= d {
			break
		}
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case sem <- struct{}{}:
		default:
			mu.Lock()
			res.Dropped++
			res.fail("dropped: too many CREATEs in flight")
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(due time.Time) {
			defer wg.Done()
			problem := createOnce(ctx, cl, path, b, noWarnings)
			lat := time.Since(due)
			<-sem
			mu.Lock()
			if problem == "" {
				res.Latencies = append(res.Latencies, lat)
			} else {
				res.fail(problem)
			}
			mu.Unlock()
		}(due)
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Requests = len(res.Latencies) + res.Errors
	return res
}

type cpuSample struct {
	at    time.Time
	ticks map[string]float64
	busy  float64 // machine: busy ticks (all cores)
	total float64 // machine: all ticks
}

func readTicks(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return ut + st, nil
}

func readMachine() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line := strings.SplitN(string(data), "\n", 2)[0]
	f := strings.Fields(line)
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}

func sampleCPU(pids map[string]int) cpuSample {
	s := cpuSample{at: time.Now(), ticks: map[string]float64{}}
	for name, pid := range pids {
		if t, err := readTicks(pid); err == nil {
			s.ticks[name] = t
		}
	}
	s.busy, s.total = readMachine()
	return s
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / 1e6
}

type pidList map[string]int

func (p pidList) String() string { return fmt.Sprint(map[string]int(p)) }
func (p pidList) Set(v string) error {
	name, pid, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want name=pid, got %q", v)
	}
	n, err := strconv.Atoi(pid)
	if err != nil {
		return err
	}
	p[name] = n
	return nil
}

type cellResult struct {
	Setup string `json:"setup"`
	// What was created: "taskruns" or "pods".
	Resource string `json:"resource"`
	// The user the CREATEs were sent as ("" for the token's own).
	As          string  `json:"as,omitempty"`
	Round       int     `json:"round"`
	Cell        string  `json:"cell"`
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	DurationS   float64 `json:"duration_s"`

	Requests     int      `json:"requests"`
	Errors       int      `json:"errors"`
	Dropped      int      `json:"dropped,omitempty"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	Throughput   float64  `json:"throughput"`
	P50          float64  `json:"p50_ms"`
	P90          float64  `json:"p90_ms"`
	P99          float64  `json:"p99_ms"`
	P999         float64  `json:"p999_ms"`
	Mean         float64  `json:"mean_ms"`
	Max          float64  `json:"max_ms"`

	WarmupRequests int `json:"warmup_requests"`
	WarmupErrors   int `json:"warmup_errors"`
	Created        int `json:"created"`
	Checked        int `json:"checked"`
	Mismatched     int `json:"mismatched"`
	// created (answered 201) minus found afterwards.
	Missing          int                `json:"missing"`
	MismatchSamples  []string           `json:"mismatch_samples,omitempty"`
	ObjectBytes      int                `json:"object_bytes"`
	ObjectJSONBytes  int                `json:"object_json_bytes"`
	DeleteSeconds    float64            `json:"delete_seconds"`
	Connections      int64              `json:"connections"`
	CPUSeconds       map[string]float64 `json:"cpu_seconds"`
	CPUMsPerCreate   map[string]float64 `json:"cpu_ms_per_create"`
	MachineBusyCores float64            `json:"machine_busy_cores"`
	OthersBusyCores  float64            `json:"others_busy_cores"`
	LoadavgStart     string             `json:"loadavg_start"`
	LoadavgEnd       string             `json:"loadavg_end"`
	Apiserver        []metricDelta      `json:"apiserver_metrics"`
	Webhook          []metricDelta      `json:"webhook_metrics,omitempty"`
	StartedAt        string             `json:"started_at"`
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var c common
	c.register(fs)
	bodyPath := fs.String("body", "", "TaskRun or Pod (JSON) to create")
	expectPath := fs.String("expect", "", "expectation every created object is checked against")
	setup := fs.String("setup", "", "name of the set-up (for the report)")
	round := fs.Int("round", 0, "round number (for the report)")
	cell := fs.String("cell", "", "cell id: the label value of the TaskRuns it creates")
	concurrency := fs.Int("concurrency", 0, "closed loop: creators")
	rate := fs.Float64("rate", 0, "open loop: CREATEs per second")
	maxInFlight := fs.Int("max-in-flight", 512, "open loop: outstanding CREATEs before dropping")
	warmup := fs.Duration("warmup", 3*time.Second, "unrecorded warm-up")
	duration := fs.Duration("duration", 20*time.Second, "measured time")
	etcd := fs.String("etcd", "", "etcd client URL, to read the stored size of one created object")
	webhookMetrics := fs.String("webhook-metrics", "", "plain-HTTP /metrics of the webhook process (bookend)")
	clkTck := fs.Float64("clk-tck", 100, "clock ticks per second (getconf CLK_TCK)")
	out := fs.String("out", "", "append the result (one JSON line) here")
	pids := pidList{}
	fs.Var(pids, "pid", "name=pid of a process whose CPU is reported (repeatable)")
	_ = fs.Parse(args)
	if (*concurrency > 0) == (*rate > 0) {
		return errors.New("give exactly one of --concurrency and --rate")
	}
	if *cell == "" {
		return errors.New("--cell is required")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	b, err := loadBody(*bodyPath, *cell)
	if err != nil {
		return err
	}
	exp, err := loadExpectation(*expectPath)
	if err != nil {
		return err
	}
	pids["client"] = os.Getpid()
	ctx := context.Background()
	path := b.collection(c.namespace)
	drive := func(d time.Duration) *loadResult {
		if *concurrency > 0 {
			return closedLoop(ctx, cl, path, b.json, c.noWarnings, *concurrency, d)
		}
		return openLoop(ctx, cl, path, b.json, c.noWarnings, *rate, d, *maxInFlight)
	}

	res := cellResult{Setup: *setup, Resource: b.resource, As: c.as, Round: *round, Cell: *cell, Concurrency: *concurrency, Rate: *rate,
		StartedAt: time.Now().UTC().Format(time.RFC3339), LoadavgStart: loadavg()}
	if *concurrency > 0 {
		res.Mode = "closed"
	} else {
		res.Mode = "open"
	}
	// Warm-up: the connection, the apiserver's caches, the webhook's connections.
	warm := drive(*warmup)
	res.WarmupRequests, res.WarmupErrors = warm.Requests, warm.Errors

	before, err := cl.apiserverMetrics(ctx)
	if err != nil {
		return err
	}
	var hookBefore series
	if *webhookMetrics != "" {
		if hookBefore, err = plainMetrics(ctx, *webhookMetrics); err != nil {
			return err
		}
	}
	cpu0 := sampleCPU(pids)
	measured := drive(*duration)
	cpu1 := sampleCPU(pids)
	after, err := cl.apiserverMetrics(ctx)
	if err != nil {
		return err
	}
	if *webhookMetrics != "" {
		hookAfter, err := plainMetrics(ctx, *webhookMetrics)
		if err != nil {
			return err
		}
		res.Webhook = deltas(hookBefore, hookAfter)
	}
	res.LoadavgEnd = loadavg()
	res.Apiserver = deltas(before, after)

	lat := measured.Latencies
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.DurationS = measured.Elapsed.Seconds()
	res.Requests, res.Errors, res.Dropped, res.ErrorSamples = measured.Requests, measured.Errors, measured.Dropped, measured.Samples
	res.Throughput = float64(len(lat)) / measured.Elapsed.Seconds()
	res.P50, res.P90, res.P99, res.P999 = percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99), percentile(lat, 0.999)
	if len(lat) > 0 {
		var total time.Duration
		for _, l := range lat {
			total += l
		}
		res.Mean = float64(total) / float64(len(lat)) / 1e6
		res.Max = float64(lat[len(lat)-1]) / 1e6
	}
	wall := cpu1.at.Sub(cpu0.at).Seconds()
	res.CPUSeconds = map[string]float64{}
	res.CPUMsPerCreate = map[string]float64{}
	ours := 0.0
	for name, t1 := range cpu1.ticks {
		t0, ok := cpu0.ticks[name]
		if !ok {
			continue
		}
		s := (t1 - t0) / *clkTck
		ours += s
		res.CPUSeconds[name] = s
		if n := len(lat); n > 0 {
			res.CPUMsPerCreate[name] = s * 1000 / float64(n)
		}
	}
	if cpu1.total > cpu0.total && wall > 0 {
		cores := float64(runtime.NumCPU())
		busyShare := (cpu1.busy - cpu0.busy) / (cpu1.total - cpu0.total)
		res.MachineBusyCores = busyShare * cores
		res.OthersBusyCores = res.MachineBusyCores - ours/wall
	}
	res.Created = len(warm.Latencies) + len(lat)

	// Every object of the cell, warm-up included: checked, sized, deleted.
	if err := checkAll(ctx, cl, &c, b, exp, *cell, *etcd, &res); err != nil {
		return err
	}
	t0 := time.Now()
	if err := deleteAll(ctx, cl, &c, b, *cell); err != nil {
		return err
	}
	if err := compactEtcd(*etcd); err != nil {
		return err
	}
	res.DeleteSeconds = time.Since(t0).Seconds()
	// One connection is what the client is built for; a second one only replaces a connection
	// the apiserver closed. Reported (and printed), not fatal.
	res.Connections = cl.dials.Load()

	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	fmt.Printf("%-22s r%d %-6s c=%-3d rate=%-5g n=%-6d err=%d %7.1f/s p50 %.2f p90 %.2f p99 %.2f ms  checked %d/%d bad %d  %d B  busy %.2f (others %.2f) load %s  conns %d\n",
		res.Setup, res.Round, res.Mode, res.Concurrency, res.Rate, len(lat), res.Errors, res.Throughput,
		res.P50, res.P90, res.P99, res.Checked, res.Created, res.Mismatched+res.Missing, res.ObjectBytes,
		res.MachineBusyCores, res.OthersBusyCores, res.LoadavgEnd, res.Connections)
	return nil
}

func selector(cell string) string {
	return url.QueryEscape(cellLabel + "=" + cell)
}

func checkAll(ctx context.Context, cl *client, c *common, b *body, exp *expectation, cell, etcd string, res *cellResult) error {
	cont := ""
	sized := false
	for {
		path := b.collection(c.namespace) + "?limit=500&labelSelector=" + selector(cell)
		if cont != "" {
			path += "&continue=" + url.QueryEscape(cont)
		}
		status, data, err := retried(ctx, cl, "GET", path, nil)
		if err != nil {
			return err
		}
		if status != 200 {
			return fmt.Errorf("list: HTTP %d: %s", status, truncate(string(data), 300))
		}
		var list struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(data, &list); err != nil {
			return err
		}
		for _, raw := range list.Items {
			var object map[string]any
			if err := json.Unmarshal(raw, &object); err != nil {
				return err
			}
			res.Checked++
			if problem := exp.check(object); problem != "" {
				res.Mismatched++
				if len(res.MismatchSamples) < 3 {
					res.MismatchSamples = append(res.MismatchSamples, problem)
				}
			}
			if !sized {
				sized = true
				meta, _ := object["metadata"].(map[string]any)
				name, _ := meta["name"].(string)
				if err := objectSize(ctx, cl, c, b, etcd, name, res); err != nil {
					return err
				}
			}
		}
		if list.Metadata.Continue == "" {
			break
		}
		cont = list.Metadata.Continue
	}
	res.Missing = res.Created - res.Checked
	return nil
}

// objectSize: the object as the apiserver returns it (JSON) and as etcd stores it.
func objectSize(ctx context.Context, cl *client, c *common, b *body, etcd, name string, res *cellResult) error {
	status, data, err := retried(ctx, cl, "GET", b.collection(c.namespace)+"/"+name, nil)
	if err != nil {
		return err
	}
	if status != 200 {
		return fmt.Errorf("get %s: HTTP %d", name, status)
	}
	res.ObjectJSONBytes = len(bytes.TrimSpace(data))
	if etcd == "" {
		return nil
	}
	key := b.etcdKey(c.namespace, name)
	req, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))})
	resp, err := http.Post(strings.TrimRight(etcd, "/")+"/v3/kv/range", "application/json", bytes.NewReader(req))
	if err != nil {
		return fmt.Errorf("etcd range: %w", err)
	}
	defer resp.Body.Close()
	var rng struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rng); err != nil {
		return fmt.Errorf("etcd range: %w", err)
	}
	if len(rng.Kvs) != 1 {
		return fmt.Errorf("etcd range %s: %d values", key, len(rng.Kvs))
	}
	value, err := base64.StdEncoding.DecodeString(rng.Kvs[0].Value)
	if err != nil {
		return err
	}
	res.ObjectBytes = len(value)
	return nil
}

// retried: a request outside the measured load, repeated (up to 5 times, backing off) while
// the apiserver answers 429, 500, 503 or 504 or the request fails.
func retried(ctx context.Context, cl *client, method, path string, body []byte) (int, []byte, error) {
	var (
		status int
		data   []byte
		err    error
	)
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 2 * time.Second)
		}
		status, data, err = cl.do(ctx, method, path, body)
		if err == nil && status != 429 && status != 500 && status != 503 && status != 504 {
			return status, data, nil
		}
	}
	return status, data, err
}

// compactEtcd compacts etcd's history up to now and defragments it, so that the TaskRuns of
// every cell, deleted, do not accumulate on disk over a long run (the apiserver compacts only
// every five minutes and never defragments).
func compactEtcd(etcd string) error {
	if etcd == "" {
		return nil
	}
	post := func(path string, body any) (map[string]any, error) {
		data, _ := json.Marshal(body)
		resp, err := http.Post(strings.TrimRight(etcd, "/")+path, "application/json", bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return nil, err
		}
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("etcd %s: HTTP %d: %v", path, resp.StatusCode, out)
		}
		return out, nil
	}
	out, err := post("/v3/kv/range", map[string]any{"key": base64.StdEncoding.EncodeToString([]byte("/registry/namespaces/default"))})
	if err != nil {
		return err
	}
	header, _ := out["header"].(map[string]any)
	revision, _ := header["revision"].(string)
	if revision == "" {
		return fmt.Errorf("etcd range: no revision in %v", out)
	}
	if _, err := post("/v3/kv/compaction", map[string]any{"revision": revision}); err != nil {
		return err
	}
	_, err = post("/v3/maintenance/defragment", map[string]any{})
	return err
}

func deleteAll(ctx context.Context, cl *client, c *common, b *body, cell string) error {
	path := b.collection(c.namespace) + "?labelSelector=" + selector(cell)
	opts := []byte(`{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		status, data, err := retried(ctx, cl, "DELETE", path, opts)
		if err != nil {
			return err
		}
		if status != 200 && status != 504 {
			return fmt.Errorf("delete: HTTP %d: %s", status, truncate(string(data), 300))
		}
		status, data, err = retried(ctx, cl, "GET", path+"&limit=1", nil)
		if err != nil {
			return err
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if status == 200 && json.Unmarshal(data, &list) == nil && len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s of the cell still there after 10 minutes of deleting", b.resource)
		}
		time.Sleep(time.Second)
	}
}
