package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podRunner runs one Pod from binding to its terminal phase.
type podRunner struct {
	k      *kubelet
	pod    *corev1.Pod // as first seen; the spec of a Pod does not change
	dir    string
	ctx    context.Context
	cancel context.CancelFunc

	statusMu sync.Mutex
	status   corev1.PodStatus

	// metaMu guards meta (the latest labels and annotations) and the downwardAPI files written
	// from it.
	metaMu   sync.Mutex
	meta     metav1.ObjectMeta
	volumes  map[string]string
	downward map[string]*corev1.DownwardAPIVolumeSource
}

func newPodRunner(parent context.Context, k *kubelet, pod *corev1.Pod) (*podRunner, error) {
	dir := filepath.Join(k.workDir, "pods", pod.Namespace+"_"+pod.Name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pod directory: %w", err)
	}
	ctx, cancel := context.WithCancel(parent)
	return &podRunner{
		k:        k,
		pod:      pod,
		dir:      dir,
		ctx:      ctx,
		cancel:   cancel,
		status:   *pod.Status.DeepCopy(),
		meta:     *pod.ObjectMeta.DeepCopy(),
		downward: map[string]*corev1.DownwardAPIVolumeSource{},
	}, nil
}

func (r *podRunner) logf(format string, args ...any) {
	log.Printf("pod %s/%s: %s", r.pod.Namespace, r.pod.Name, fmt.Sprintf(format, args...))
}

// observe takes a newer version of the Pod: the kubelet refreshes downwardAPI volumes when
// labels or annotations change (Tekton starts the first step by annotating the Pod).
func (r *podRunner) observe(pod *corev1.Pod) {
	r.metaMu.Lock()
	defer r.metaMu.Unlock()
	r.meta = *pod.ObjectMeta.DeepCopy()
	if r.volumes == nil {
		return // not prepared yet; prepareVolumes writes from r.meta
	}
	for name, source := range r.downward {
		if err := r.writeDownward(r.volumes[name], source); err != nil {
			r.logf("downwardAPI volume %s: %v", name, err)
		}
	}
}

func (r *podRunner) run() {
	defer r.cancel()
	spec := &r.pod.Spec
	now := metav1.Now()
	firstWait := "ContainerCreating"
	if len(spec.InitContainers) > 0 {
		firstWait = "PodInitializing"
	}
	r.update(func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.HostIP = "127.0.0.1"
		s.StartTime = &now
		s.InitContainerStatuses = nil
		for _, c := range spec.InitContainers {
			s.InitContainerStatuses = append(s.InitContainerStatuses, waiting(c, "PodInitializing", ""))
		}
		s.ContainerStatuses = nil
		for _, c := range spec.Containers {
			s.ContainerStatuses = append(s.ContainerStatuses, waiting(c, firstWait, ""))
		}
		setCondition(s, corev1.PodScheduled, true, "", "")
		setCondition(s, corev1.PodInitialized, len(spec.InitContainers) == 0, "ContainersNotInitialized", "")
		setCondition(s, corev1.ContainersReady, false, "ContainersNotReady", "")
		setCondition(s, corev1.PodReady, false, "ContainersNotReady", "")
	})

	images := map[string]imageEntry{}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		image, ok := r.k.images.lookup(c.Image)
		if !ok {
			r.stuck(c.Name, "ErrImagePull", fmt.Sprintf("image %q is not mapped to a local root filesystem (kubelet stand-in --images)", c.Image))
			return
		}
		images[c.Name] = image
	}
	if err := r.prepareVolumes(); err != nil {
		for _, c := range spec.Containers {
			r.stuck(c.Name, "CreateContainerConfigError", err.Error())
		}
		return
	}

	for i, c := range spec.InitContainers {
		r.update(func(s *corev1.PodStatus) { s.InitContainerStatuses[i] = running(c, time.Now()) })
		result := r.runContainer(c, images[c.Name])
		failed := result.exitCode != 0
		r.update(func(s *corev1.PodStatus) {
			s.InitContainerStatuses[i] = terminated(c, result)
			if failed {
				s.Phase = corev1.PodFailed
				message := fmt.Sprintf("init container %s exited with code %d", c.Name, result.exitCode)
				setCondition(s, corev1.PodInitialized, false, "ContainersNotInitialized", message)
				for j, other := range spec.Containers {
					s.ContainerStatuses[j] = waiting(other, "PodInitializing", "")
				}
			}
		})
		if failed || r.ctx.Err() != nil {
			return
		}
	}

	started := time.Now()
	r.update(func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		setCondition(s, corev1.PodInitialized, true, "", "")
		for i, c := range spec.Containers {
			s.ContainerStatuses[i] = running(c, started)
		}
		setReadiness(s)
	})
	var wg sync.WaitGroup
	for i, c := range spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			result := r.runContainer(c, images[c.Name])
			r.update(func(s *corev1.PodStatus) {
				s.ContainerStatuses[i] = terminated(c, result)
				if phase, done := finalPhase(s.ContainerStatuses); done {
					s.Phase = phase
				}
				setReadiness(s)
			})
		}()
	}
	wg.Wait()
}

// stuck reports a container that cannot start, as the kubelet does (the Pod stays Pending),
// and waits until the Pod is deleted or the stand-in stops.
func (r *podRunner) stuck(container, reason, message string) {
	r.logf("%s: %s: %s", container, reason, message)
	r.update(func(s *corev1.PodStatus) {
		for i := range s.ContainerStatuses {
			if s.ContainerStatuses[i].Name == container {
				s.ContainerStatuses[i].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
			}
		}
	})
	<-r.ctx.Done()
}

func finalPhase(statuses []corev1.ContainerStatus) (corev1.PodPhase, bool) {
	phase := corev1.PodSucceeded
	for _, s := range statuses {
		if s.State.Terminated == nil {
			return "", false
		}
		if s.State.Terminated.ExitCode != 0 {
			phase = corev1.PodFailed
		}
	}
	return phase, true
}

func waiting(c corev1.Container, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:    c.Name,
		Image:   c.Image,
		State:   corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
		Started: new(false),
	}
}

func running(c corev1.Container, at time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:    c.Name,
		Image:   c.Image,
		ImageID: imageID(c.Image),
		State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}},
		Ready:   true,
		Started: new(true),
	}
}

func terminated(c corev1.Container, result containerResult) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:    c.Name,
		Image:   c.Image,
		ImageID: imageID(c.Image),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode:    result.exitCode,
			Reason:      result.reason,
			Message:     result.message,
			StartedAt:   metav1.NewTime(result.started),
			FinishedAt:  metav1.NewTime(result.finished),
			ContainerID: "runc://" + result.id,
		}},
		Started: new(false),
	}
}

// imageID stands for the digest a runtime would report. Local images have none, so the SHA-256
// of the reference stands in, in the runtime's form `<repository>@sha256:<hex>`: Tekton copies it
// to status.steps[].imageID, and Tekton Chains refuses a TaskRun whose imageID is not
// `<name>@<algorithm>:<digest>` (runtime scenario 19 runs Chains' formatters).
func imageID(image string) string {
	sum := sha256.Sum256([]byte(image))
	return repository(image) + "@sha256:" + hex.EncodeToString(sum[:])
}

func setReadiness(s *corev1.PodStatus) {
	var unready []string
	for _, c := range s.ContainerStatuses {
		if !c.Ready {
			unready = append(unready, c.Name)
		}
	}
	switch {
	case s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed:
		setCondition(s, corev1.ContainersReady, false, "PodCompleted", "")
		setCondition(s, corev1.PodReady, false, "PodCompleted", "")
	case len(unready) > 0:
		message := fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
		setCondition(s, corev1.ContainersReady, false, "ContainersNotReady", message)
		setCondition(s, corev1.PodReady, false, "ContainersNotReady", message)
	default:
		setCondition(s, corev1.ContainersReady, true, "", "")
		setCondition(s, corev1.PodReady, true, "", "")
	}
}

func setCondition(s *corev1.PodStatus, kind corev1.PodConditionType, ok bool, reason, message string) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
		reason, message = "", ""
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if c.Type != kind {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.Now()
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{
		Type: kind, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.Now(),
	})
}

// update changes the Pod's status and writes it to the API server. Status writes of one Pod are
// serialised, so the API server sees the transitions in order (it refuses, for instance, a
// container going from terminated back to running).
func (r *podRunner) update(change func(*corev1.PodStatus)) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	change(&r.status)
	if r.k.stopping() {
		return
	}
	pods := r.k.client.CoreV1().Pods(r.pod.Namespace)
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var latest *corev1.Pod
		latest, err = pods.Get(ctx, r.pod.Name, metav1.GetOptions{})
		if err == nil && latest.UID != r.pod.UID {
			err = errors.New("the Pod was replaced")
		}
		if err == nil {
			owned := r.status.DeepCopy()
			latest.Status.Phase = owned.Phase
			latest.Status.HostIP = owned.HostIP
			latest.Status.StartTime = owned.StartTime
			latest.Status.Conditions = owned.Conditions
			latest.Status.InitContainerStatuses = owned.InitContainerStatuses
			latest.Status.ContainerStatuses = owned.ContainerStatuses
			_, err = pods.UpdateStatus(ctx, latest, metav1.UpdateOptions{})
		}
		cancel()
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !apierrors.IsConflict(err) {
			r.logf("status update: %v", err)
		}
	}
	r.logf("status update gave up: %v", err)
}
