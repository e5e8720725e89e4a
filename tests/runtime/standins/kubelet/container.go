package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// maxTerminationMessage is the kubelet's limit on a container's termination message.
const maxTerminationMessage = 4096

type containerResult struct {
	id                string
	exitCode          int32
	reason            string
	message           string
	started, finished time.Time
}

// runContainer runs one container to completion under runc, with its own overlay root
// filesystem, and returns what the kubelet would report for it.
func (r *podRunner) runContainer(c corev1.Container, image imageEntry) containerResult {
	result := containerResult{
		id:      fmt.Sprintf("%s-%s", string(r.pod.UID)[:8], c.Name),
		started: time.Now(),
	}
	startError := func(err error) containerResult {
		r.logf("%s: %v", c.Name, err)
		result.exitCode, result.reason, result.message = 128, "StartError", err.Error()
		result.finished = time.Now()
		return result
	}
	dir := filepath.Join(r.dir, "containers", c.Name)
	bundle := filepath.Join(dir, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{rootfs, filepath.Join(dir, "upper"), filepath.Join(dir, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return startError(err)
		}
	}
	spec, terminationLog, err := r.ociSpec(c, image, dir)
	if err != nil {
		return startError(err)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return startError(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		return startError(err)
	}
	overlay := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
		image.Rootfs, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := syscall.Mount("overlay", rootfs, "overlay", 0, overlay); err != nil {
		return startError(fmt.Errorf("overlay root filesystem: %w", err))
	}
	defer func() {
		if err := syscall.Unmount(rootfs, syscall.MNT_DETACH); err != nil {
			r.logf("%s: unmount root filesystem: %v", c.Name, err)
		}
	}()

	logFile, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return startError(err)
	}
	defer logFile.Close()
	runcLog := filepath.Join(dir, "runc.log")
	root := filepath.Join(r.k.workDir, "runc")
	cmd := exec.Command(r.k.runc, "--root", root, "--log", runcLog, "--log-format", "json",
		"run", "--bundle", bundle, result.id)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	result.started = time.Now()
	if err := cmd.Start(); err != nil {
		return startError(err)
	}
	exited := make(chan struct{})
	go r.killOnCancel(cmd, root, result.id, exited)
	err = cmd.Wait()
	close(exited)
	result.finished = time.Now()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		result.exitCode = int32(exit.ExitCode())
		if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			result.exitCode = 128 + int32(status.Signal())
		}
	default:
		return startError(err)
	}
	// runc's own failures (the process could not be started) are in its log, not in the exit
	// code, which is 1 as for a container that exits 1.
	if message := runcError(runcLog); message != "" {
		return startError(errors.New(message))
	}
	result.reason = "Completed"
	if result.exitCode != 0 {
		result.reason = "Error"
	}
	result.message = readLimited(terminationLog, maxTerminationMessage)
	return result
}

// killOnCancel kills the container when the Pod is deleted or the stand-in stops.
func (r *podRunner) killOnCancel(cmd *exec.Cmd, root, id string, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-r.ctx.Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, r.k.runc, "--root", root, "kill", "--all", id, "KILL").Run()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		// Not created yet, or runc is stuck: end runc itself.
		_ = cmd.Process.Kill()
	}
}

func runcError(path string) string {
	file, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer file.Close()
	var messages []string
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(lines.Bytes(), &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") {
			messages = append(messages, entry.Msg)
		}
	}
	return strings.Join(messages, "; ")
}

func readLimited(path string, limit int64) string {
	file, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer file.Close()
	data, _ := io.ReadAll(io.LimitReader(file, limit))
	return string(data)
}

// ociSpec builds the runc configuration of a container: process (command, args, env, user,
// working directory, as the kubelet resolves them), the Pod's volumes as bind mounts, and the
// termination-message file.
func (r *podRunner) ociSpec(c corev1.Container, image imageEntry, dir string) (map[string]any, string, error) {
	env, vars, err := r.environment(c, image)
	if err != nil {
		return nil, "", err
	}
	if len(c.Command) == 0 {
		return nil, "", errors.New("no command: image entrypoints are not emulated by the kubelet stand-in (give the step a command or a script)")
	}
	var args []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		args = append(args, expand(a, vars))
	}
	uid, gid := image.UID, image.GID
	for _, sc := range []*corev1.SecurityContext{c.SecurityContext, podSecurityContext(r.pod.Spec.SecurityContext)} {
		if sc != nil && sc.RunAsUser != nil {
			uid = uint32(*sc.RunAsUser)
			break
		}
	}
	for _, sc := range []*corev1.SecurityContext{c.SecurityContext, podSecurityContext(r.pod.Spec.SecurityContext)} {
		if sc != nil && sc.RunAsGroup != nil {
			gid = uint32(*sc.RunAsGroup)
			break
		}
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = image.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	readOnlyRoot := c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem

	terminationLog := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(terminationLog, nil, 0o666); err != nil {
		return nil, "", err
	}
	if err := os.Chmod(terminationLog, 0o666); err != nil {
		return nil, "", err
	}
	terminationPath := c.TerminationMessagePath
	if terminationPath == "" {
		terminationPath = corev1.TerminationMessagePathDefault
	}

	mounts := []map[string]any{
		{"destination": "/proc", "type": "proc", "source": "proc"},
		{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []string{"nosuid", "noexec", "nodev"}},
		{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	var volumeMounts []map[string]any
	for _, m := range c.VolumeMounts {
		source, ok := r.volumes[m.Name]
		if !ok {
			return nil, "", fmt.Errorf("volumeMount %s: no volume of that name", m.Name)
		}
		if m.SubPath != "" {
			source = filepath.Join(source, m.SubPath)
			if err := os.MkdirAll(source, 0o777); err != nil {
				return nil, "", err
			}
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		volumeMounts = append(volumeMounts, map[string]any{
			"destination": m.MountPath, "type": "bind", "source": source,
			"options": []string{"rbind", mode},
		})
	}
	volumeMounts = append(volumeMounts, map[string]any{
		"destination": terminationPath, "type": "bind", "source": terminationLog,
		"options": []string{"bind", "rw"},
	})
	// Parents before children, as container runtimes order mounts.
	sort.SliceStable(volumeMounts, func(i, j int) bool {
		return depth(volumeMounts[i]["destination"].(string)) < depth(volumeMounts[j]["destination"].(string))
	})
	mounts = append(mounts, volumeMounts...)

	capabilities := []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
		"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
	}
	hostname := r.pod.Name
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": uid, "gid": gid},
			"args":     args,
			"env":      env,
			"cwd":      cwd,
			"capabilities": map[string]any{
				"bounding": capabilities, "effective": capabilities, "permitted": capabilities,
			},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": readOnlyRoot},
		"hostname": hostname,
		"mounts":   mounts,
		"linux": map[string]any{
			"namespaces": r.namespaces(),
			// Top level, so runc removes all of it when the container ends.
			"cgroupsPath": "/kubelet-standin-" + filepath.Base(r.dir) + "-" + c.Name,
			"resources": map[string]any{
				"devices": []map[string]any{{"allow": false, "access": "rwm"}},
			},
			"maskedPaths": []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
			},
			"readonlyPaths": []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
	return spec, terminationLog, nil
}

func depth(path string) int {
	return strings.Count(filepath.Clean(path), "/")
}

func podSecurityContext(p *corev1.PodSecurityContext) *corev1.SecurityContext {
	if p == nil {
		return nil
	}
	return &corev1.SecurityContext{RunAsUser: p.RunAsUser, RunAsGroup: p.RunAsGroup}
}

// environment is the container's environment as the kubelet builds it: the image's, then the
// container's own (each value expanded with the container variables defined before it). vars
// holds the container variables, which are what $(VAR) in command and args may name.
func (r *podRunner) environment(c corev1.Container, image imageEntry) ([]string, map[string]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, nil, errors.New("envFrom is not emulated by the kubelet stand-in")
	}
	vars := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, seen := vars[name]; !seen {
			order = append(order, name)
		}
		vars[name] = value
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			r.metaMu.Lock()
			value, err := r.fieldValue(e.ValueFrom.FieldRef.FieldPath)
			r.metaMu.Unlock()
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, value)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			data, err := r.configMapData(ref.Name, ref.Optional)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, string(data[ref.Key]))
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			data, err := r.secretData(ref.Name, ref.Optional)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, string(data[ref.Key]))
		default:
			return nil, nil, fmt.Errorf("env %s: this valueFrom is not emulated by the kubelet stand-in", e.Name)
		}
	}
	var env []string
	for _, kv := range image.Env {
		name, _, _ := strings.Cut(kv, "=")
		if _, overridden := vars[name]; !overridden {
			env = append(env, kv)
		}
	}
	for _, name := range order {
		env = append(env, name+"="+vars[name])
	}
	return env, vars, nil
}

// NodeNetworkAnnotation on a Pod (Tekton copies a TaskRun's annotations to its Pod) runs its
// containers in the node's network namespace, as hostNetwork does; without it each container
// gets an empty one. The runtime suite's hermetic scenario needs a network to take away.
const NodeNetworkAnnotation = "kubelet-standin.bookend.test/node-network"

func (r *podRunner) namespaces() []map[string]any {
	namespaces := []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}
	if !r.pod.Spec.HostNetwork && r.pod.Annotations[NodeNetworkAnnotation] != "true" {
		namespaces = append(namespaces, map[string]any{"type": "network"})
	}
	return namespaces
}
