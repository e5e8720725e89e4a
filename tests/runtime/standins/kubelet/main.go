// Command kubelet-standin runs the Pods of a test cluster that has no kubelet: it binds each new
// Pod to a pretend node, runs its init containers in order and then all its containers together
// under runc, and reports Pod status to the API server the way a kubelet does. Images are not
// pulled: each image name maps to a local root filesystem (--images).
//
// It exists for bookend's runtime suite (tests/runtime), where Tekton's real controller creates
// the Pods and Tekton's real entrypoint binary orders the steps inside them. Emulated besides:
// a container's memory limit (its cgroup, without swap) and OOM kills as a kubelet on cgroup v2
// reports them (the whole container killed at the first kill, memory.oom.group; reason
// OOMKilled, read from the cgroup's oom_kill count); a node without user namespaces (the
// annotation kubelet-standin.bookend.test/no-user-namespaces: "true", a per-container seccomp
// filter). Not emulated: networking (every container gets an empty network namespace, but with
// hostNetwork or the annotation kubelet-standin.bookend.test/node-network: "true" the node's),
// CPU limits, probes, image pulls and image entrypoints, native sidecars, restarts. See
// docs/testing.md.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// privateNamespaceEnv marks the re-executed child that runs in its own mount namespace.
const privateNamespaceEnv = "KUBELET_STANDIN_PRIVATE_MOUNTS"

type kubelet struct {
	ctx     context.Context
	client  kubernetes.Interface
	node    string
	workDir string
	runc    string
	images  *imageMap

	mu      sync.Mutex
	pods    map[types.UID]*podRunner
	bound   map[types.UID]bool
	running sync.WaitGroup
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the test cluster")
	node := flag.String("node-name", "runtime-node", "node name the Pods are bound to")
	workDir := flag.String("work-dir", "", "directory for Pod volumes, container logs and runc state (required)")
	imagesFile := flag.String("images", "", "JSON file mapping image names to root filesystems (required)")
	runc := flag.String("runc", "runc", "runc binary")
	flag.Parse()
	if *workDir == "" || *imagesFile == "" {
		log.Fatal("--work-dir and --images are required")
	}

	// Overlay root filesystems are mounted by this process. In a mount namespace of its own they
	// vanish with it, even if it is killed; so re-execute once with CLONE_NEWNS (Go mounts the
	// new namespace's / private, so nothing propagates back to the host).
	if os.Getenv(privateNamespaceEnv) == "" {
		os.Exit(reexecInPrivateMountNamespace())
	}

	images, err := loadImages(*imagesFile)
	if err != nil {
		log.Fatalf("images: %v", err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	config.QPS, config.Burst = 50, 100
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatalf("client: %v", err)
	}
	for _, dir := range []string{"pods", "runc"} {
		if err := os.MkdirAll(filepath.Join(*workDir, dir), 0o755); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k := &kubelet{
		ctx:     ctx,
		client:  client,
		node:    *node,
		workDir: *workDir,
		runc:    *runc,
		images:  images,
		pods:    map[types.UID]*podRunner{},
		bound:   map[types.UID]bool{},
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { k.observe(ctx, obj) },
		DeleteFunc: k.forget,
	}); err != nil {
		log.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		log.Fatal("pod informer did not sync")
	}
	log.Printf("kubelet-standin: node %s, %d images, work dir %s: ready", k.node, len(images.entries), k.workDir)

	<-ctx.Done()
	log.Printf("kubelet-standin: stopping; killing running containers")
	k.mu.Lock()
	for _, runner := range k.pods {
		runner.cancel()
	}
	k.mu.Unlock()
	k.running.Wait()
	factory.Shutdown()
	log.Printf("kubelet-standin: stopped")
}

func reexecInPrivateMountNamespace() int {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	child := exec.Command(self, os.Args[1:]...)
	child.Env = append(os.Environ(), privateNamespaceEnv+"=1")
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	if err := child.Start(); err != nil {
		log.Fatalf("re-exec in a private mount namespace: %v", err)
	}
	go func() {
		for s := range signals {
			_ = child.Process.Signal(s)
		}
	}()
	err = child.Wait()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode()
	}
	if err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// observe binds unscheduled Pods and starts a runner for each Pod bound to this node.
func (k *kubelet) observe(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if runner, ok := k.pods[pod.UID]; ok {
		runner.observe(pod)
		return
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	switch pod.Spec.NodeName {
	case "":
		if !k.bound[pod.UID] {
			k.bound[pod.UID] = true
			go k.bind(ctx, pod)
		}
	case k.node:
		runner, err := newPodRunner(ctx, k, pod.DeepCopy())
		if err != nil {
			log.Printf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
			return
		}
		k.pods[pod.UID] = runner
		k.running.Add(1)
		go func() {
			defer k.running.Done()
			runner.run()
		}()
	}
}

// stopping is true once the stand-in was told to stop: status writes end then.
func (k *kubelet) stopping() bool { return k.ctx.Err() != nil }

func (k *kubelet) bind(ctx context.Context, pod *corev1.Pod) {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.node},
	}
	if err := k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		log.Printf("pod %s/%s: bind: %v", pod.Namespace, pod.Name, err)
		// Try again on the Pod's next event.
		k.mu.Lock()
		delete(k.bound, pod.UID)
		k.mu.Unlock()
	}
}

func (k *kubelet) forget(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if runner, ok := k.pods[pod.UID]; ok {
		runner.cancel()
	}
	delete(k.bound, pod.UID)
}
