// Command tekton-conversion serves the CRD conversion webhook that Tekton's own webhook serves
// in a real cluster, for TaskRuns: tekton.dev/v1beta1 <-> tekton.dev/v1 with Tekton's own
// conversion functions (ConvertTo/ConvertFrom through the v1beta1 hub, then SetDefaults, as
// knative's conversion webhook does for Tekton). bookend's runtime suite registers it on the
// TaskRun CRD, so a v1beta1 TaskRun is stored, read and run exactly as Tekton converts it.
//
// It stands in for Tekton's webhook binary, which would also need a Service, a certificate
// secret it manages itself and its own CRD reconciliation, none of which the test cluster has.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	v1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	apixv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/apis"
)

// convertible is what Tekton's API types implement for conversion.
type convertible interface {
	runtime.Object
	ConvertTo(ctx context.Context, to apis.Convertible) error
	ConvertFrom(ctx context.Context, from apis.Convertible) error
}

// versions of each kind, keyed by API version; Tekton converts every kind through v1beta1.
var kinds = map[string]map[string]func() convertible{
	"TaskRun": {
		"v1beta1": func() convertible { return &v1beta1.TaskRun{} },
		"v1":      func() convertible { return &v1.TaskRun{} },
	},
}

const hubVersion = "v1beta1"

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTPS on")
	cert := flag.String("tls-cert", "", "serving certificate (PEM)")
	key := flag.String("tls-key", "", "serving key (PEM)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", serve)
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("tekton-conversion: serving https://%s/convert", *listen)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}

func serve(w http.ResponseWriter, r *http.Request) {
	var review apixv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
		return
	}
	request := review.Request
	response := &apixv1.ConversionResponse{UID: request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, object := range request.Objects {
		converted, err := convert(r.Context(), object.Raw, request.DesiredAPIVersion)
		if err != nil {
			log.Printf("conversion to %s failed: %v", request.DesiredAPIVersion, err)
			response.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			response.ConvertedObjects = nil
			break
		}
		response.ConvertedObjects = append(response.ConvertedObjects, runtime.RawExtension{Raw: converted})
	}
	review.Request, review.Response = nil, response
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func convert(ctx context.Context, raw []byte, desired string) ([]byte, error) {
	var meta metav1.TypeMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	from, err := schema.ParseGroupVersion(meta.APIVersion)
	if err != nil {
		return nil, err
	}
	to, err := schema.ParseGroupVersion(desired)
	if err != nil {
		return nil, err
	}
	versions, ok := kinds[meta.Kind]
	if !ok {
		return nil, fmt.Errorf("no conversion for kind %q", meta.Kind)
	}
	newIn, okIn := versions[from.Version]
	newOut, okOut := versions[to.Version]
	if !okIn || !okOut {
		return nil, fmt.Errorf("no conversion for %s from %s to %s", meta.Kind, from.Version, to.Version)
	}
	in := newIn()
	if err := json.Unmarshal(raw, in); err != nil {
		return nil, err
	}
	hub := versions[hubVersion]()
	if from.Version == hubVersion {
		hub = in
	} else if err := hub.ConvertFrom(ctx, in); err != nil {
		return nil, err
	}
	out := newOut()
	if to.Version == hubVersion {
		out = hub
	} else if err := hub.ConvertTo(ctx, out); err != nil {
		return nil, err
	}
	out.GetObjectKind().SetGroupVersionKind(to.WithKind(meta.Kind))
	defaultable, ok := out.(apis.Defaultable)
	if !ok {
		return nil, errors.New("not defaultable")
	}
	defaultable.SetDefaults(ctx)
	return json.Marshal(out)
}
