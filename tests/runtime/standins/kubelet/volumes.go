package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// prepareVolumes makes a host directory for each of the Pod's volumes: empty for emptyDir
// (world-writable, as the kubelet makes it, so any container user can write), filled for
// downwardAPI, configMap and secret; hostPath is used as it is.
func (r *podRunner) prepareVolumes() error {
	r.metaMu.Lock()
	defer r.metaMu.Unlock()
	volumes := map[string]string{}
	for _, v := range r.pod.Spec.Volumes {
		dir := filepath.Join(r.dir, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
			// MkdirAll's mode is filtered by the umask.
			if err := os.Chmod(dir, 0o777); err != nil {
				return err
			}
		case v.DownwardAPI != nil:
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := r.writeDownward(dir, v.DownwardAPI); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
			r.downward[v.Name] = v.DownwardAPI
		case v.ConfigMap != nil:
			data, err := r.configMapData(v.ConfigMap.Name, v.ConfigMap.Optional)
			if err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeKeys(dir, data, v.ConfigMap.Items, v.ConfigMap.DefaultMode); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Secret != nil:
			data, err := r.secretData(v.Secret.SecretName, v.Secret.Optional)
			if err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeKeys(dir, data, v.Secret.Items, v.Secret.DefaultMode); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.HostPath != nil:
			dir = v.HostPath.Path
		default:
			return fmt.Errorf("volume %s: this volume source is not emulated by the kubelet stand-in", v.Name)
		}
		volumes[v.Name] = dir
	}
	r.volumes = volumes
	return nil
}

func (r *podRunner) configMapData(name string, optional *bool) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	cm, err := r.k.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional != nil && *optional {
			return nil, nil
		}
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data, nil
}

func (r *podRunner) secretData(name string, optional *bool) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	secret, err := r.k.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional != nil && *optional {
			return nil, nil
		}
		return nil, err
	}
	return secret.Data, nil
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, item := range items {
		value, ok := data[item.Key]
		if !ok {
			return fmt.Errorf("key %q not found", item.Key)
		}
		m := mode
		if item.Mode != nil {
			m = os.FileMode(*item.Mode)
		}
		if err := writeFileAtomic(filepath.Join(dir, item.Path), value, m); err != nil {
			return err
		}
	}
	return nil
}

// writeDownward (re)writes a downwardAPI volume's files from the Pod's latest metadata. Each file
// is replaced by a rename, so a reader sees the old or the new content, never a partial one.
func (r *podRunner) writeDownward(dir string, source *corev1.DownwardAPIVolumeSource) error {
	mode := os.FileMode(0o644)
	if source.DefaultMode != nil {
		mode = os.FileMode(*source.DefaultMode)
	}
	for _, item := range source.Items {
		if item.FieldRef == nil {
			return fmt.Errorf("%s: only fieldRef items are emulated", item.Path)
		}
		value, err := r.fieldValue(item.FieldRef.FieldPath)
		if err != nil {
			return fmt.Errorf("%s: %w", item.Path, err)
		}
		m := mode
		if item.Mode != nil {
			m = os.FileMode(*item.Mode)
		}
		if err := writeFileAtomic(filepath.Join(dir, item.Path), []byte(value), m); err != nil {
			return err
		}
	}
	return nil
}

var keyedField = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']+)'\]$`)

// fieldValue resolves a downward API field path against the Pod (r.meta holds the latest
// metadata; callers hold metaMu).
func (r *podRunner) fieldValue(path string) (string, error) {
	if m := keyedField.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return r.meta.Labels[m[2]], nil
		}
		return r.meta.Annotations[m[2]], nil
	}
	switch path {
	case "metadata.name":
		return r.pod.Name, nil
	case "metadata.namespace":
		return r.pod.Namespace, nil
	case "metadata.uid":
		return string(r.pod.UID), nil
	case "metadata.labels":
		return formatMap(r.meta.Labels), nil
	case "metadata.annotations":
		return formatMap(r.meta.Annotations), nil
	case "spec.nodeName":
		return r.k.node, nil
	case "spec.serviceAccountName":
		return r.pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("field %q is not emulated", path)
}

// formatMap writes labels or annotations as the downward API does: key="value" lines, sorted.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
