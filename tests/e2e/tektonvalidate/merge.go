package main

// --merge: Tekton's own stepTemplate merge, for the differential test of bookend's port
// (src/tekton/merge.rs, tests/e2e/merge.rs).
//
// Input (stdin): one JSON object per line,
//
//	{"version": "v1" | "v1beta1", "template": {...} | null, "step": {...}}
//
// template and step are decoded into the version's StepTemplate and Step types, unknown fields
// being errors (as in Tekton's webhooks). Output (stdout): one JSON object per non-blank input
// line, in order, each flushed as soon as it is written:
//
//	{"step": {...}}     the step MergeStepsWithStepTemplate returns, marshalled back to JSON
//	{"error": "..."}    the input did not decode, or the merge returned an error
//
// v1 uses github.com/tektoncd/pipeline/pkg/apis/pipeline/v1.MergeStepsWithStepTemplate, v1beta1
// the v1beta1 function of the same name.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	v1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
)

type mergeInput struct {
	Version  string          `json:"version"`
	Template json.RawMessage `json:"template"`
	Step     json.RawMessage `json:"step"`
}

type mergeOutput struct {
	Step  json.RawMessage `json:"step,omitempty"`
	Error string          `json:"error,omitempty"`
}

func runMerge(stdin io.Reader, stdout, stderr io.Writer) int {
	rd := bufio.NewReader(stdin)
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for {
		line, err := rd.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var out mergeOutput
			step, mergeErr := mergeLine(line)
			if mergeErr != nil {
				out.Error = mergeErr.Error()
			} else {
				out.Step = step
			}
			// one answer per line, flushed: a caller may talk to the process line by line
			if err := enc.Encode(out); err != nil {
				fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
				return 2
			}
			if err := w.Flush(); err != nil {
				fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
				return 2
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
			return 2
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
		return 2
	}
	return 0
}

// strict decodes data into v, unknown fields being errors; "null" or nothing leaves v alone.
func strict(data json.RawMessage, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func isNull(data json.RawMessage) bool {
	d := bytes.TrimSpace(data)
	return len(d) == 0 || string(d) == "null"
}

func mergeLine(line []byte) (json.RawMessage, error) {
	var in mergeInput
	if err := strict(line, &in); err != nil {
		return nil, fmt.Errorf("decode input: %w", err)
	}
	switch in.Version {
	case "v1":
		var step v1.Step
		if err := strict(in.Step, &step); err != nil {
			return nil, fmt.Errorf("decode step: %w", err)
		}
		var template *v1.StepTemplate
		if !isNull(in.Template) {
			template = &v1.StepTemplate{}
			if err := strict(in.Template, template); err != nil {
				return nil, fmt.Errorf("decode template: %w", err)
			}
		}
		merged, err := v1.MergeStepsWithStepTemplate(template, []v1.Step{step})
		if err != nil {
			return nil, err
		}
		return json.Marshal(merged[0])
	case "v1beta1":
		var step v1beta1.Step
		if err := strict(in.Step, &step); err != nil {
			return nil, fmt.Errorf("decode step: %w", err)
		}
		var template *v1beta1.StepTemplate
		if !isNull(in.Template) {
			template = &v1beta1.StepTemplate{}
			if err := strict(in.Template, template); err != nil {
				return nil, fmt.Errorf("decode template: %w", err)
			}
		}
		merged, err := v1beta1.MergeStepsWithStepTemplate(template, []v1beta1.Step{step})
		if err != nil {
			return nil, err
		}
		return json.Marshal(merged[0])
	default:
		return nil, fmt.Errorf("unknown version %q (want v1 or v1beta1)", in.Version)
	}
}
