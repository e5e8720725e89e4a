// Command tekton-validate checks TaskRuns with Tekton's own admission code: for every TaskRun
// document it does what Tekton's webhooks (tektoncd/pipeline cmd/webhook, knative.dev/pkg
// defaulting + validation admission controllers) do on CREATE:
//
//  1. decode with knative.dev/pkg/webhook/json.Decode(..., disallowUnknownFields=true)
//     into the Go type of the document's apiVersion (tekton.dev/v1 or tekton.dev/v1beta1);
//  2. build the context Tekton's config store builds (feature-flags + config-defaults
//     ConfigMaps; default enable-api-fields=beta), then apis.WithinCreate + apis.WithUserInfo;
//  3. SetDefaults(ctx)   (Tekton's defaulting webhook, a mutating webhook);
//     then, like the apiserver does before validating admission, metadata.generateName -> name;
//     the defaulted object is marshalled and decoded again (disallowing unknown fields);
//  4. Validate(ctx)      (Tekton's validation webhook), errors = Filter(apis.ErrorLevel),
//     warnings = Filter(apis.WarningLevel).
//
// Usage: tekton-validate [flags] FILE|DIR|- ...
//
// Exit status: 0 all TaskRuns valid, 1 at least one invalid, 2 usage or I/O error.
//
// With --merge it runs Tekton's stepTemplate merge instead (merge.go).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tektoncd/pipeline/pkg/apis/config"
	v1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"knative.dev/pkg/apis"
	kjson "knative.dev/pkg/webhook/json"
	"sigs.k8s.io/yaml"
)

type kvFlag map[string]string

func (m kvFlag) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k+"="+m[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (m kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	m[k] = v
	return nil
}

// result is one line of output (and one element of the --json array).
type result struct {
	File       string   `json:"file"`
	Doc        int      `json:"doc"`
	APIVersion string   `json:"apiVersion,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	Name       string   `json:"name"`
	Skipped    bool     `json:"skipped,omitempty"`
	OK         bool     `json:"ok"`
	Error      string   `json:"error,omitempty"`
	Errors     []string `json:"errors,omitempty"`
	Warning    string   `json:"warning,omitempty"`
	// Defaulted is the object after Tekton's SetDefaults (only with --print-defaulted).
	Defaulted json.RawMessage `json:"defaulted,omitempty"`
}

type validatable interface {
	SetDefaults(context.Context)
	Validate(context.Context) *apis.FieldError
	GetName() string
	GetGenerateName() string
	SetName(string)
}

var usageText = `Usage: tekton-validate [flags] FILE|DIR|- ...

Validates every TaskRun (tekton.dev/v1 and tekton.dev/v1beta1) found in the given files
(multi-document YAML, JSON objects, JSON arrays, or kind: List), directories (walked for
*.yaml, *.yml, *.json) or stdin ("-") with Tekton's own SetDefaults + Validate in a CREATE
context, exactly as Tekton's admission webhooks do. Other kinds are reported as SKIP.

Output: one line per document, "<file>#<doc> <name> OK|INVALID <error>|SKIP <reason>"
(<doc> is the 0-based index of the object in the file; newlines in errors become "; "),
then "validated N, ok A, invalid B, skipped S". With --json: a JSON array instead.
Exit status: 0 all valid, 1 any invalid, 2 usage or I/O error.

Flags (before the file arguments):
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("tekton-validate", flag.ContinueOnError)
	fset.SetOutput(stderr)
	featureFlags := kvFlag{"enable-api-fields": "beta"}
	defaults := kvFlag{}
	fset.Var(featureFlags, "feature-flag", "`key=value` of Tekton's feature-flags ConfigMap (repeatable)")
	fset.Var(defaults, "default", "`key=value` of Tekton's config-defaults ConfigMap (repeatable), e.g. default-timeout-minutes=60")
	asJSON := fset.Bool("json", false, "print a JSON array of {file, doc, apiVersion, kind, name, ok, skipped, error, errors, warning}")
	quiet := fset.Bool("quiet", false, "print only INVALID lines and the summary")
	printDefaulted := fset.Bool("print-defaulted", false, "with --json: include the object after SetDefaults as \"defaulted\"")
	user := fset.String("user", "tekton-validate", "username put into the admission context (apis.WithUserInfo)")
	merge := fset.Bool("merge", false, "read {version, template, step} JSON lines from stdin and print what Tekton's MergeStepsWithStepTemplate makes of each step (no file arguments)")
	fset.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *merge {
		if fset.NArg() != 0 {
			fmt.Fprintln(stderr, "tekton-validate: --merge reads stdin and takes no file arguments")
			return 2
		}
		return runMerge(stdin, stdout, stderr)
	}
	if fset.NArg() == 0 {
		fset.Usage()
		return 2
	}

	base, err := tektonContext(featureFlags, defaults)
	if err != nil {
		fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
		return 2
	}
	ctx := apis.WithUserInfo(apis.WithinCreate(base), &authenticationv1.UserInfo{Username: *user})

	files, err := expand(fset.Args())
	if err != nil {
		fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
		return 2
	}

	var results []result
	for _, f := range files {
		var data []byte
		if f == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
			return 2
		}
		name := f
		if f == "-" {
			name = "<stdin>"
		}
		results = append(results, validateFile(ctx, name, data, *printDefaulted)...)
	}

	var ok, invalid, skipped int
	for _, r := range results {
		switch {
		case r.Skipped:
			skipped++
		case r.OK:
			ok++
		default:
			invalid++
		}
	}
	if *asJSON {
		if results == nil {
			results = []result{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(results); err != nil {
			fmt.Fprintf(stderr, "tekton-validate: %v\n", err)
			return 2
		}
	} else {
		w := bufio.NewWriter(stdout)
		for _, r := range results {
			if *quiet && (r.OK || r.Skipped) {
				continue
			}
			fmt.Fprintf(w, "%s#%d %s ", r.File, r.Doc, r.Name)
			switch {
			case r.Skipped:
				fmt.Fprintf(w, "SKIP %s\n", r.Error)
			case r.OK && r.Warning != "":
				fmt.Fprintf(w, "OK WARNING %s\n", r.Warning)
			case r.OK:
				fmt.Fprintln(w, "OK")
			default:
				fmt.Fprintf(w, "INVALID %s\n", r.Error)
			}
		}
		fmt.Fprintf(w, "validated %d, ok %d, invalid %d, skipped %d\n", ok+invalid, ok, invalid, skipped)
		if err := w.Flush(); err != nil {
			return 2
		}
	}
	if invalid > 0 {
		return 1
	}
	return 0
}

// tektonContext builds what Tekton's config store (pkg/apis/config Store.ToContext) attaches:
// every sub-config at its default, feature flags and defaults parsed from the given maps
// exactly like the feature-flags / config-defaults ConfigMaps.
func tektonContext(featureFlags, defaults map[string]string) (context.Context, error) {
	ff, err := config.NewFeatureFlagsFromMap(featureFlags)
	if err != nil {
		return nil, fmt.Errorf("feature flags: %w", err)
	}
	d, err := config.NewDefaultsFromMap(defaults)
	if err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	cfg := config.FromContextOrDefaults(context.Background()) // fresh deep copies of all defaults
	cfg.FeatureFlags, cfg.Defaults = ff, d
	return config.ToContext(context.Background(), cfg), nil
}

// expand turns directory arguments into the sorted list of *.yaml/*.yml/*.json files below them.
func expand(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if a == "-" {
			out = append(out, a)
			continue
		}
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		var found []string
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					found = append(found, p)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// splitObjects returns the JSON of every object in a file: YAML documents, JSON objects,
// JSON arrays and kind: *List objects (their items) are flattened.
func splitObjects(data []byte) ([]json.RawMessage, error) {
	var docs []json.RawMessage
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return docs, err
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return docs, err
		}
		docs = append(docs, flatten(js)...)
	}
	return docs, nil
}

func flatten(js []byte) []json.RawMessage {
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return nil
	}
	if js[0] == '[' {
		var arr []json.RawMessage
		if err := json.Unmarshal(js, &arr); err == nil {
			var out []json.RawMessage
			for _, e := range arr {
				out = append(out, flatten(e)...)
			}
			return out
		}
	}
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(js, &list); err == nil && strings.HasSuffix(list.Kind, "List") && list.Items != nil {
		var out []json.RawMessage
		for _, e := range list.Items {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []json.RawMessage{json.RawMessage(js)}
}

func validateFile(ctx context.Context, file string, data []byte, printDefaulted bool) []result {
	objs, err := splitObjects(data)
	var results []result
	for i, js := range objs {
		results = append(results, validateObject(ctx, file, i, js, printDefaulted))
	}
	if err != nil {
		results = append(results, invalidResult(result{File: file, Doc: len(objs), Name: "<unparsable>"},
			fmt.Errorf("cannot parse YAML/JSON: %w", err)))
	}
	return results
}

func validateObject(ctx context.Context, file string, doc int, js json.RawMessage, printDefaulted bool) result {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name         string `json:"name"`
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
	}
	r := result{File: file, Doc: doc, Name: "<unnamed>"}
	if err := json.Unmarshal(js, &meta); err != nil {
		return invalidResult(r, fmt.Errorf("not an object: %w", err))
	}
	r.APIVersion, r.Kind = meta.APIVersion, meta.Kind
	switch {
	case meta.Metadata.Name != "":
		r.Name = meta.Metadata.Name
	case meta.Metadata.GenerateName != "":
		r.Name = meta.Metadata.GenerateName
	}
	if meta.Kind != "TaskRun" {
		r.Skipped, r.OK = true, true
		r.Error = fmt.Sprintf("%s %s (not a TaskRun)", orDash(meta.APIVersion), orDash(meta.Kind))
		return r
	}
	obj := newTaskRun(meta.APIVersion)
	if obj == nil {
		return invalidResult(r, fmt.Errorf("unsupported apiVersion %q for TaskRun (want tekton.dev/v1 or tekton.dev/v1beta1)", meta.APIVersion))
	}
	// Same decoder and options as Tekton's webhooks: unknown fields are errors (except in metadata).
	if err := kjson.Decode(js, obj, true); err != nil {
		return invalidResult(r, fmt.Errorf("decode: %w", err))
	}
	// Defaulting webhook: SetDefaults; the apiserver then applies its JSON patch, i.e. the object
	// the validating webhook receives is the JSON of the defaulted Go object.
	obj.SetDefaults(ctx)
	// Between mutating and validating admission the apiserver's registry store turns
	// metadata.generateName into metadata.name (k8s.io/apiserver registry/generic/registry/store.go
	// create(): CreateStrategy.GenerateName = names.SimpleNameGenerator), so mutating webhooks see
	// name "" but validating webhooks see a name. Do the same (base cut to 58 chars + 5 characters
	// of the same alphabet; deterministic here - derived from the input - so output is reproducible).
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		base := obj.GetGenerateName()
		if len(base) > 58 {
			base = base[:58]
		}
		obj.SetName(base + nameSuffix(js))
	}
	defaulted, err := json.Marshal(obj)
	if err != nil {
		return invalidResult(r, fmt.Errorf("marshal defaulted object: %w", err))
	}
	if printDefaulted {
		r.Defaulted = defaulted
	}
	// Validating webhook: decode that JSON again (unknown fields disallowed) and Validate.
	obj = newTaskRun(meta.APIVersion)
	if err := kjson.Decode(defaulted, obj, true); err != nil {
		return invalidResult(r, fmt.Errorf("decode defaulted object: %w", err))
	}
	fe := obj.Validate(ctx)
	if w := fe.Filter(apis.WarningLevel); w != nil {
		r.Warning = oneLine(w.Error())
	}
	if e := fe.Filter(apis.ErrorLevel); e != nil {
		return invalidResult(r, e)
	}
	r.OK = true
	return r
}

// nameSuffix returns 5 characters of the alphabet of k8s.io/apimachinery/pkg/util/rand (which the
// apiserver's SimpleNameGenerator uses), derived from data instead of random.
func nameSuffix(data []byte) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	sum := sha256.Sum256(data)
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(b)
}

// newTaskRun returns an empty TaskRun of the Go type for apiVersion, or nil.
func newTaskRun(apiVersion string) validatable {
	switch apiVersion {
	case "tekton.dev/v1":
		return &v1.TaskRun{}
	case "tekton.dev/v1beta1":
		return &v1beta1.TaskRun{}
	}
	return nil
}

func invalidResult(r result, err error) result {
	msg := err.Error()
	r.OK = false
	r.Error = oneLine(msg)
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			r.Errors = append(r.Errors, l)
		}
	}
	return r
}

// oneLine joins the lines of a (multi-line) error message with "; ".
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
