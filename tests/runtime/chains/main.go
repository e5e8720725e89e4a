// Command chains-provenance runs Tekton Chains' own provenance formatters (the module version
// go.mod pins) on a finished TaskRun, as Chains' TaskRun signer does before it signs: the
// configuration is parsed from Chains' ConfigMap keys, the payloader of
// `artifacts.taskrun.format` formats the TaskRun, and the payload is serialised as the signer
// serialises it. Nothing is signed or stored; the output is the in-toto statement Chains would
// sign.
//
//	chains-provenance [<chains-config key>=<value> ...] < taskrun.json > statement.json
//
// e.g. `artifacts.taskrun.format=slsa/v2alpha4 builddefinition.buildtype=https://tekton.dev/chains/v2/slsa-tekton`.
// The TaskRun is the object as the API server returns it (`kubectl get taskrun -o json`),
// apiVersion tekton.dev/v1: Chains reconciles v1 TaskRuns. Exit status 2 and a message on
// stderr for bad input.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/tektoncd/chains/pkg/chains/formats"
	_ "github.com/tektoncd/chains/pkg/chains/formats/all" // registers every payloader, as Chains' controller does
	"github.com/tektoncd/chains/pkg/chains/objects"
	"github.com/tektoncd/chains/pkg/config"
	v1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func main() {
	out, err := run(os.Args[1:], os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chains-provenance: %v\n", err)
		os.Exit(2)
	}
	os.Stdout.Write(append(out, '\n'))
}

func run(args []string, in io.Reader) ([]byte, error) {
	data := map[string]string{}
	for _, arg := range args {
		key, value, ok := strings.Cut(arg, "=")
		if !ok {
			return nil, fmt.Errorf("argument %q: want <chains-config key>=<value>", arg)
		}
		data[key] = value
	}
	// Chains' own parser: unknown formats and buildTypes are refused here as Chains refuses them.
	cfg, err := config.NewConfigFromMap(data)
	if err != nil {
		return nil, fmt.Errorf("chains config: %w", err)
	}
	raw, err := io.ReadAll(in)
	if err != nil {
		return nil, fmt.Errorf("reading the TaskRun: %w", err)
	}
	var tr v1.TaskRun
	if err := json.Unmarshal(raw, &tr); err != nil {
		return nil, fmt.Errorf("the TaskRun: %w", err)
	}
	if tr.APIVersion != "tekton.dev/v1" || tr.Kind != "TaskRun" {
		return nil, fmt.Errorf("want a tekton.dev/v1 TaskRun, got apiVersion %q kind %q", tr.APIVersion, tr.Kind)
	}
	format := config.PayloadType(cfg.Artifacts.TaskRuns.Format)
	payloader, err := formats.GetPayloader(format, *cfg)
	if err != nil {
		return nil, err
	}
	ctx := config.ToContext(context.Background(), cfg)
	payload, err := payloader.CreatePayload(ctx, objects.NewTaskRunObjectV1(&tr))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", format, err)
	}
	// As Chains' signer serialises a payload: protobuf statements with protojson, others with
	// encoding/json.
	switch p := payload.(type) {
	case *intoto.Statement:
		return protojson.Marshal(p)
	case intoto.Statement:
		return protojson.Marshal(&p)
	default:
		return json.Marshal(payload)
	}
}
