package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMerge(t *testing.T) {
	input := strings.Join([]string{
		// Tekton's TestMergeStepsWithStepTemplate/merge-and-overwrite-slice
		`{"version":"v1","template":{"env":[{"name":"KEEP_THIS","value":"A_VALUE"},{"name":"SOME_KEY","value":"ORIGINAL_VALUE"}]},` +
			`"step":{"name":"s","displayName":"dropped","script":"echo","env":[{"name":"NEW_KEY","value":"A_VALUE"},{"name":"SOME_KEY","value":"NEW_VALUE"}]}}`,
		``,
		`{"version":"v1beta1","template":{"resources":{"limits":{"cpu":"0.5"}}},"step":{"name":"s","resources":{"requests":{"cpu":"1000m"}}}}`,
		`{"version":"v1","template":null,"step":{"name":"s","image":"i"}}`,
		`{"version":"v1","template":{},"step":{"name":"s","bogus":1}}`,
		`{"version":"v2","template":{},"step":{}}`,
		`{"version":"v1","template":{"env":[{"name":"A"}]},"step":{"env":[{"name":"B","value":"1"},{"name":"C","value":"2"},{"name":"B","value":"3"}]}}`,
	}, "\n")
	code, out, errOut := runWith(t, input, "--merge")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		`{"name":"s","env":[{"name":"NEW_KEY","value":"A_VALUE"},{"name":"KEEP_THIS","value":"A_VALUE"},{"name":"SOME_KEY","value":"NEW_VALUE"}],"computeResources":{},"script":"echo"}`,
		`{"name":"s","resources":{"limits":{"cpu":"500m"},"requests":{"cpu":"1"}}}`,
		`{"name":"s","image":"i","computeResources":{}}`,
		`decode step: json: unknown field "bogus"`,
		`unknown version "v2"`,
		`doesn't match $setElementOrder list`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		var o mergeOutput
		if err := json.Unmarshal([]byte(lines[i]), &o); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		if got := string(o.Step) + o.Error; !strings.Contains(got, w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, got, w)
		}
	}
	if code, _, _ := runWith(t, "", "--merge", "file.json"); code != 2 {
		t.Errorf("--merge with a file argument: exit %d, want 2", code)
	}
}
