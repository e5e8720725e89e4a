package main

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "x"},
		{"a$(A)b$(A)", "axbx"},
		{"$(EMPTY)|", "|"},
		{"$(B)", "$(B)"},
		{"$$(A)", "$(A)"},
		{"$$", "$"},
		{"cost $5", "cost $5"},
		{"end$", "end$"},
		{"$(A", "$(A"},
		{"$(steps.x.results.y)", "$(steps.x.results.y)"},
	} {
		if got := expand(c.in, vars); got != c.want {
			t.Errorf("expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRepository(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox"},
		{"busybox:1.37", "docker.io/library/busybox"},
		{"docker.io/library/busybox:1.37", "docker.io/library/busybox"},
		{"library/busybox@sha256:abc", "docker.io/library/busybox"},
		{"cgr.dev/chainguard/busybox@sha256:19f0", "cgr.dev/chainguard/busybox"},
		{"localhost:5000/x:tag", "localhost:5000/x"},
		{"registry.local/a/b", "registry.local/a/b"},
	} {
		if got := repository(c.in); got != c.want {
			t.Errorf("repository(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
