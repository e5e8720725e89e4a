package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const validV1 = `apiVersion: tekton.dev/v1
kind: TaskRun
metadata:
  generateName: hello-
spec:
  taskSpec:
    steps:
    - name: hi
      image: alpine
      script: echo hi
`

const validV1beta1 = `apiVersion: tekton.dev/v1beta1
kind: TaskRun
metadata:
  name: old-style
spec:
  taskSpec:
    steps:
    - name: hi
      image: alpine
      script: echo hi
`

func runWith(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestLines(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		input string
		code  int
		want  []string
	}{
		{"valid v1 with generateName", nil, validV1, 0,
			[]string{"<stdin>#0 hello- OK", "validated 1, ok 1, invalid 0, skipped 0"}},
		{"valid v1beta1", nil, validV1beta1, 0, []string{"<stdin>#0 old-style OK"}},
		{"unknown field", nil, strings.Replace(validV1, "script:", "scriptt:", 1), 1,
			[]string{`INVALID decode: json: unknown field "scriptt"`, "validated 1, ok 0, invalid 1, skipped 0"}},
		{"taskRef and taskSpec", nil, validV1 + "  taskRef:\n    name: x\n", 1,
			[]string{"INVALID expected exactly one, got both: spec.taskRef, spec.taskSpec"}},
		{"no steps", nil, "apiVersion: tekton.dev/v1\nkind: TaskRun\nmetadata: {name: a}\nspec:\n  taskSpec: {}\n", 1,
			[]string{"INVALID missing field(s): spec.taskSpec.steps"}},
		{"other kinds skipped", nil, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n" + validV1, 0,
			[]string{"<stdin>#0 s SKIP v1 Secret (not a TaskRun)", "<stdin>#1 hello- OK", "validated 1, ok 1, invalid 0, skipped 1"}},
		{"unsupported version", nil, strings.Replace(validV1, "tekton.dev/v1", "tekton.dev/v1alpha1", 1), 1,
			[]string{`INVALID unsupported apiVersion "tekton.dev/v1alpha1"`}},
		{"alpha field rejected at beta", nil, validV1 + "      stdoutConfig:\n        path: /x\n", 1,
			[]string{`requires "enable-api-fields" feature gate to be "alpha" but it is "beta"`}},
		{"alpha field accepted with flag", []string{"--feature-flag", "enable-api-fields=alpha"},
			validV1 + "      stdoutConfig:\n        path: /x\n", 0, []string{"hello- OK"}},
		{"json list", nil, `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"tekton.dev/v1","kind":"TaskRun","metadata":{"name":"a"},"spec":{"taskRef":{"name":"t"}}},{"apiVersion":"tekton.dev/v1","kind":"TaskRun","metadata":{"name":"b"},"spec":{}}]}`, 1,
			[]string{"<stdin>#0 a OK", "<stdin>#1 b INVALID expected exactly one, got neither: spec.taskRef, spec.taskSpec"}},
		{"empty input", nil, "", 0, []string{"validated 0, ok 0, invalid 0, skipped 0"}},
		{"bad feature flag", []string{"--feature-flag", "enable-api-fields=bogus"}, validV1, 2, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runWith(t, c.input, append(c.args, "-")...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	if code, _, _ := runWith(t, ""); code != 2 {
		t.Errorf("no arguments: exit %d, want 2", code)
	}
	if code, _, _ := runWith(t, "", "/nonexistent/file.yaml"); code != 2 {
		t.Errorf("missing file: exit %d, want 2", code)
	}
	if code, _, _ := runWith(t, "", "--no-such-flag", "-"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
}

func TestJSON(t *testing.T) {
	code, out, errOut := runWith(t, validV1+"---\n"+strings.Replace(validV1, "image: alpine", "image: ''", 1),
		"--json", "--print-defaulted", "-")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, errOut)
	}
	var res []struct {
		File      string          `json:"file"`
		Doc       int             `json:"doc"`
		Name      string          `json:"name"`
		OK        bool            `json:"ok"`
		Error     string          `json:"error"`
		Errors    []string        `json:"errors"`
		Defaulted json.RawMessage `json:"defaulted"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if len(res) != 2 || !res[0].OK || res[1].OK || res[1].Doc != 1 || res[0].File != "<stdin>" {
		t.Fatalf("unexpected results: %s", out)
	}
	// sic: Tekton reports the Go field name "Image" here, not the JSON name.
	if !strings.Contains(res[1].Error, "missing field(s): spec.taskSpec.steps[0].Image") {
		t.Errorf("error %q lacks the image path", res[1].Error)
	}
	var d struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Timeout            string `json:"timeout"`
			ServiceAccountName string `json:"serviceAccountName"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(res[0].Defaulted, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Metadata.Name, "hello-") || len(d.Metadata.Name) != len("hello-")+5 ||
		d.Spec.Timeout != "1h0m0s" || d.Spec.ServiceAccountName != "default" ||
		d.Metadata.Labels["app.kubernetes.io/managed-by"] != "tekton-pipelines" {
		t.Errorf("unexpected defaulted object: %s", res[0].Defaulted)
	}
}
