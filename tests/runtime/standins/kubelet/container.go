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
	"strconv"
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
	// --keep: runc would remove the container's cgroup as it exits, and with it the OOM-kill
	// count killOnOOM reads; the stand-in deletes the container itself after.
	cmd := exec.Command(r.k.runc, "--root", root, "--log", runcLog, "--log-format", "json",
		"run", "--keep", "--bundle", bundle, result.id)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	result.started = time.Now()
	if err := cmd.Start(); err != nil {
		return startError(err)
	}
	defer r.deleteContainer(root, result.id)
	exited := make(chan struct{})
	go r.killOnCancel(cmd, root, result.id, exited)
	oom := make(chan bool, 1)
	if memoryLimited(spec) {
		go func() { oom <- r.killOnOOM(root, result.id, containerCgroup(spec), exited) }()
	} else {
		oom <- false
	}
	err = cmd.Wait()
	close(exited)
	result.finished = time.Now()
	oomKilled := <-oom
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
	switch {
	case oomKilled:
		// As a kubelet reports it: from the cgroup, whatever the exit code.
		result.reason = "OOMKilled"
	case result.exitCode != 0:
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

// deleteContainer removes what runc --keep left: the container's state and its cgroup.
func (r *podRunner) deleteContainer(root, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, r.k.runc, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
		r.logf("%s: runc delete: %v: %s", id, err, out)
	}
}

// killOnOOM kills the whole container when its memory runs out, as the kernel does on cgroup v2
// with memory.oom.group (set by kubelets since Kubernetes 1.28), and says whether it did. The
// OOM killer alone would take the largest process, the step's command, and Tekton's entrypoint
// (the container's first process) would survive to report it. On cgroup v2 the spec's
// memory.oom.group does it; the cgroup's memory.events oom_kill count tells. On cgroup v1
// there is no oom.group: the spec disables the OOM killer, so the container waits at its limit
// (memory.oom_control under_oom 1), and the stand-in kills all of it then. Either way read
// from the cgroup, never guessed from an exit code.
func (r *podRunner) killOnOOM(root, id, cgroup string, exited <-chan struct{}) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cgroupV2() {
			if oomKills(cgroup) > 0 {
				return true
			}
		} else if underOOM(cgroup) {
			r.logf("%s: out of memory in cgroup %s: killing the container", id, cgroup)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = exec.CommandContext(ctx, r.k.runc, "--root", root, "kill", "--all", id, "KILL").Run()
			cancel()
			return true
		}
		select {
		case <-exited:
			return cgroupV2() && oomKills(cgroup) > 0
		case <-tick.C:
		}
	}
}

const cgroupRoot = "/sys/fs/cgroup"

// cgroupV2 is true on a unified hierarchy (cgroup2 mounted at /sys/fs/cgroup).
func cgroupV2() bool {
	var fs syscall.Statfs_t
	return syscall.Statfs(cgroupRoot, &fs) == nil && fs.Type == 0x63677270 // CGROUP2_SUPER_MAGIC
}

// containerCgroup is the container's memory cgroup directory (runc's cgroupfs driver puts a
// cgroupsPath under each hierarchy's root).
func containerCgroup(spec map[string]any) string {
	path, _ := spec["linux"].(map[string]any)["cgroupsPath"].(string)
	if cgroupV2() {
		return filepath.Join(cgroupRoot, path)
	}
	return filepath.Join(cgroupRoot, "memory", path)
}

func memoryLimited(spec map[string]any) bool {
	resources, _ := spec["linux"].(map[string]any)["resources"].(map[string]any)
	_, limited := resources["memory"]
	return limited
}

// oomKills is the cgroup v2 count of processes the OOM killer killed (memory.events).
func oomKills(cgroup string) int {
	return cgroupValue(filepath.Join(cgroup, "memory.events"), "oom_kill")
}

// underOOM is true while a cgroup v1 with its OOM killer disabled is at its limit.
func underOOM(cgroup string) bool {
	return cgroupValue(filepath.Join(cgroup, "memory.oom_control"), "under_oom") > 0
}

// cgroupValue reads `key N` from a cgroup file of such lines (0 when absent).
func cgroupValue(path, key string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if value, found := strings.CutPrefix(line, key+" "); found {
			n, _ := strconv.Atoi(strings.TrimSpace(value))
			return n
		}
	}
	return 0
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
	resources := map[string]any{
		"devices": []map[string]any{{"allow": false, "access": "rwm"}},
	}
	// The memory limit as the kubelet sets it: swap included (memory+swap = the limit, no
	// swap), and on cgroup v2 the whole container killed at an OOM kill.
	if limit := c.Resources.Limits.Memory(); limit != nil && !limit.IsZero() {
		memory := map[string]any{"limit": limit.Value(), "swap": limit.Value()}
		if cgroupV2() {
			resources["unified"] = map[string]string{"memory.oom.group": "1"}
		} else {
			memory["disableOOMKiller"] = true // the stand-in kills the container (killOnOOM)
		}
		resources["memory"] = memory
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
			"seccomp":    r.seccomp(),
			"namespaces": r.namespaces(),
			// Top level, so runc delete removes all of it.
			"cgroupsPath": "/kubelet-standin-" + filepath.Base(r.dir) + "-" + c.Name,
			"resources":   resources,
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

// NoUserNamespacesAnnotation on a Pod stands for a node where containers cannot create user
// namespaces (user.max_user_namespaces=0, or a runtime's default seccomp profile, which refuses
// them without CAP_SYS_ADMIN): its containers get a seccomp filter refusing unshare and clone
// with CLONE_NEWUSER (EPERM), and clone3 (ENOSYS, so callers fall back to clone, as under the
// runtimes' default profile). Per container, not a machine-wide sysctl: other test runs share
// the machine. The runtime suite's hermetic scenario runs Tekton's jail there.
const NoUserNamespacesAnnotation = "kubelet-standin.bookend.test/no-user-namespaces"

const cloneNewUser = 0x10000000 // CLONE_NEWUSER

func (r *podRunner) seccomp() any {
	if r.pod.Annotations[NoUserNamespacesAnnotation] != "true" {
		return nil
	}
	newUser := []map[string]any{{"index": 0, "value": cloneNewUser, "valueTwo": cloneNewUser, "op": "SCMP_CMP_MASKED_EQ"}}
	eperm, enosys := 1, 38
	return map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"architectures": []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_AARCH64"},
		"syscalls": []map[string]any{
			{"names": []string{"unshare", "clone"}, "action": "SCMP_ACT_ERRNO", "errnoRet": eperm, "args": newUser},
			{"names": []string{"clone3"}, "action": "SCMP_ACT_ERRNO", "errnoRet": enosys},
		},
	}
}
