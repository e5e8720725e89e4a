package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// imageEntry is one local image: a root filesystem and the parts of an image config the
// stand-in honours.
type imageEntry struct {
	// Name is the repository without tag or digest, e.g. docker.io/library/busybox.
	Name       string   `json:"name"`
	Rootfs     string   `json:"rootfs"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Env        []string `json:"env"`
	WorkingDir string   `json:"workingDir"`
}

type imageMap struct {
	entries map[string]imageEntry
}

func loadImages(path string) (*imageMap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Images []imageEntry `json:"images"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m := &imageMap{entries: map[string]imageEntry{}}
	for _, e := range file.Images {
		if st, err := os.Stat(e.Rootfs); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("image %s: rootfs %q is not a directory", e.Name, e.Rootfs)
		}
		m.entries[repository(e.Name)] = e
	}
	return m, nil
}

// lookup finds the local image for a Pod's image reference, whatever its tag or digest.
func (m *imageMap) lookup(ref string) (imageEntry, bool) {
	e, ok := m.entries[repository(ref)]
	return e, ok
}

// repository normalises an image reference as the container runtimes do (docker.io/library/ for
// short names) and drops the digest and tag.
func repository(ref string) string {
	if at := strings.Index(ref, "@"); at >= 0 {
		ref = ref[:at]
	}
	if slash := strings.LastIndex(ref, "/"); strings.LastIndex(ref, ":") > slash {
		ref = ref[:strings.LastIndex(ref, ":")]
	}
	parts := strings.SplitN(ref, "/", 2)
	switch {
	case len(parts) == 1:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(parts[0], ".:") && parts[0] != "localhost":
		return "docker.io/" + ref
	}
	return ref
}
