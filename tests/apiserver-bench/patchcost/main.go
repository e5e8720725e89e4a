// patchcost: what applying a mutating webhook's JSON patch costs the kube-apiserver, with the
// apiserver's own code for it (k8s.io/apiserver's mutating dispatcher, v1.36: decode the
// patch with gopkg.in/evanphx/json-patch.v4, encode the object, apply, decode the result into
// an Unstructured, compare it with the object before). Used by `scripts/bench-apiserver.sh
// --patch-cost` to compare patch shapes that give the same object (docs/apiserver-benchmark.md).
//
//	patchcost OBJECT.json NAME=PATCH.json [NAME=PATCH.json ...]
//
// Prints per patch: operations, bytes, ns/op, B/op and allocs/op (the median of 5 interleaved
// rounds of testing.Benchmark; B/op and allocs/op do not depend on the machine's load).
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

type candidate struct {
	name  string
	patch []byte
	ops   int
	res   []testing.BenchmarkResult
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: patchcost OBJECT.json NAME=PATCH.json ...")
		os.Exit(2)
	}
	objectJSON, err := os.ReadFile(os.Args[1])
	check(err)
	// As the apiserver serves a custom resource: Unstructured objects.
	serializer := json.NewSerializerWithOptions(json.DefaultMetaFactory,
		unstructuredscheme.NewUnstructuredCreator(), unstructuredscheme.NewUnstructuredObjectTyper(),
		json.SerializerOptions{})
	object := &unstructured.Unstructured{}
	_, _, err = serializer.Decode(objectJSON, nil, object)
	check(err)

	var cands []*candidate
	var reference *unstructured.Unstructured
	for _, arg := range os.Args[2:] {
		name, path, ok := strings.Cut(arg, "=")
		if !ok {
			check(fmt.Errorf("want NAME=PATCH.json, got %q", arg))
		}
		data, err := os.ReadFile(path)
		check(err)
		p, err := jsonpatch.DecodePatch(data)
		check(err)
		// Every candidate must give the same object.
		out := apply(serializer, object, data)
		if reference == nil {
			reference = out
		} else if !equality.Semantic.DeepEqual(reference, out) {
			check(fmt.Errorf("%s gives another object than the first patch", name))
		}
		cands = append(cands, &candidate{name: name, patch: data, ops: len(p)})
	}
	for round := 0; round < 5; round++ {
		for _, c := range cands {
			c := c
			c.res = append(c.res, testing.Benchmark(func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					apply(serializer, object, c.patch)
				}
			}))
		}
	}
	fmt.Printf("%-14s %5s %7s %10s %9s %9s\n", "patch", "ops", "bytes", "ns/op", "B/op", "allocs/op")
	for _, c := range cands {
		sort.Slice(c.res, func(i, j int) bool { return c.res[i].NsPerOp() < c.res[j].NsPerOp() })
		m := c.res[len(c.res)/2]
		fmt.Printf("%-14s %5d %7d %10d %9d %9d\n", c.name, c.ops, len(c.patch), m.NsPerOp(), m.AllocedBytesPerOp(), m.AllocsPerOp())
	}
}

// apply: what the dispatcher does with a webhook's JSON patch (callAttrMutatingHook).
func apply(serializer runtime.Serializer, object *unstructured.Unstructured, patch []byte) *unstructured.Unstructured {
	p, err := jsonpatch.DecodePatch(patch)
	check(err)
	objJS, err := runtime.Encode(serializer, object)
	check(err)
	patched, err := p.Apply(objJS)
	check(err)
	out := &unstructured.Unstructured{}
	_, _, err = serializer.Decode(patched, nil, out)
	check(err)
	if equality.Semantic.DeepEqual(object, out) {
		check(fmt.Errorf("the patch changed nothing"))
	}
	return out
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "patchcost:", err)
		os.Exit(1)
	}
}
