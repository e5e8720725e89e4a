// promql-selectors parses PromQL expressions with Prometheus's own parser and prints, for each,
// the series selectors it reads (metric name and label matchers) or the parse error. The chart
// tests use it to check that every metric the alerting rules and the Grafana dashboard query is
// one bookend (or an allow-listed exporter) really exports, with label names it really has.
//
// Input: a JSON array of strings on stdin. Output: a JSON array, one object per expression:
//
//	{"selectors": [{"name": "m", "matchers": [{"name": "l", "type": "=", "value": "v"}]}], "error": ""}
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

type matcher struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

type selector struct {
	Name     string    `json:"name"`
	Matchers []matcher `json:"matchers"`
}

type result struct {
	Selectors []selector `json:"selectors"`
	Error     string     `json:"error"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "promql-selectors: stdin must be a JSON array of strings:", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	out := make([]result, 0, len(exprs))
	for _, text := range exprs {
		r := result{Selectors: []selector{}}
		expr, err := p.ParseExpr(text)
		if err != nil {
			r.Error = err.Error()
		} else {
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				vs, ok := node.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				s := selector{Name: vs.Name, Matchers: []matcher{}}
				for _, m := range vs.LabelMatchers {
					if m.Name == "__name__" {
						continue
					}
					s.Matchers = append(s.Matchers, matcher{Name: m.Name, Type: m.Type.String(), Value: m.Value})
				}
				r.Selectors = append(r.Selectors, s)
				return nil
			})
		}
		out = append(out, r)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "promql-selectors:", err)
		os.Exit(1)
	}
}
