//! What executes TaskRuns in the test cluster: Tekton's own controller, the kubelet stand-in that
//! runs Pods under runc, the local images it runs them from, and the TaskRun conversion webhook.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::daemon::Daemon;
use crate::kube::{Kubectl, free_port, poll};
use crate::prereqs::Host;
use crate::tools::Tools;

/// Image of the steps and of bookend's helper steps (bookend's default `--helper-image`).
pub const BUSYBOX: &str = "docker.io/library/busybox:1.37";
/// Images the controller is told to use for its own containers. The entrypoint and the shell
/// are mapped to local root filesystems; the other three are left unmapped on purpose, so a Pod
/// that needs one fails visibly (ErrImagePull) instead of running something else.
const ENTRYPOINT_IMAGE: &str = "bookend.test/tekton/entrypoint:v1.15.0";
const SHELL_IMAGE: &str = "bookend.test/tekton/shell:v1.15.0";
const UNMAPPED_IMAGES: [(&str, &str); 4] = [
    ("-nop-image", "bookend.test/tekton/nop:unmapped"),
    (
        "-sidecarlogresults-image",
        "bookend.test/tekton/sidecarlogresults:unmapped",
    ),
    (
        "-workingdirinit-image",
        "bookend.test/tekton/workingdirinit:unmapped",
    ),
    ("-shell-image-win", "bookend.test/tekton/pwsh:unmapped"),
];
const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The user of Tekton's ko-built images (the distroless "nonroot" user).
const NONROOT: u32 = 65532;

/// Root filesystems built at test time: busybox-static with its applets for busybox and
/// Tekton's shell image; Tekton's entrypoint binary at /ko-app/entrypoint (where the controller's
/// `prepare` init container runs it from) for the entrypoint image. Returns the image map for
/// the kubelet stand-in.
pub fn build_images(dir: &Path, host: &Host, tools: &Tools) -> PathBuf {
    let busybox = dir.join("busybox");
    let entrypoint = dir.join("entrypoint");
    for root in [&busybox, &entrypoint] {
        for sub in ["etc", "tmp", "root"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir rootfs");
        }
        std::fs::write(
            root.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n",
        )
        .expect("passwd");
        std::fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").expect("group");
        chmod(&root.join("tmp"), 0o1777);
    }
    std::fs::create_dir_all(busybox.join("bin")).expect("mkdir bin");
    std::fs::copy(&host.busybox, busybox.join("bin/busybox")).expect("copy busybox");
    let applets = Command::new(&host.busybox)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        let link = busybox.join("bin").join(applet);
        if applet != "busybox" && !link.exists() {
            std::os::unix::fs::symlink("busybox", link).expect("applet link");
        }
    }
    std::fs::create_dir_all(entrypoint.join("ko-app")).expect("mkdir ko-app");
    std::fs::copy(
        tools.path("tekton-entrypoint"),
        entrypoint.join("ko-app/entrypoint"),
    )
    .expect("copy Tekton's entrypoint");

    let busybox_image = |name: &str| json!({"name": name, "rootfs": busybox, "env": [PATH]});
    let map = json!({"images": [
        busybox_image(BUSYBOX),
        busybox_image(SHELL_IMAGE),
        {"name": ENTRYPOINT_IMAGE, "rootfs": entrypoint, "uid": NONROOT, "gid": NONROOT,
         "env": [PATH]},
    ]});
    let file = dir.join("images.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&map).unwrap()).expect("images.json");
    file
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The kubelet stand-in (tests/runtime/standins/kubelet).
pub fn start_kubelet(
    work: &Path,
    kubectl: &Kubectl,
    images: &Path,
    host: &Host,
    tools: &Tools,
) -> Daemon {
    let dir = work.join("kubelet");
    std::fs::create_dir_all(&dir).expect("mkdir kubelet");
    let mut cmd = Command::new(tools.path("kubelet-standin"));
    cmd.arg("--kubeconfig")
        .arg(&kubectl.kubeconfig)
        .arg("--work-dir")
        .arg(&dir)
        .arg("--images")
        .arg(images)
        .arg("--runc")
        .arg(&host.runc);
    let mut daemon = Daemon::start("kubelet stand-in", cmd, work.join("kubelet.log"));
    daemon.wait_for_log(": ready", Duration::from_secs(60));
    daemon
}

/// Tekton's controller's ServiceAccount: its user is the one bookend's webhook configurations
/// match (the dry-run Task CREATE and the Pod CREATE).
pub const CONTROLLER_SA: (&str, &str) = ("tekton-pipelines", "tekton-pipelines-controller");
/// The remote resolvers' ServiceAccount (config/resolvers/200-serviceaccount.yaml).
const RESOLVERS_SA: (&str, &str) = ("tekton-pipelines-resolvers", "tekton-pipelines-resolvers");

/// Tekton's controller as a host process, with the environment of Tekton's
/// config/controller.yaml, leader election off, and free ports for what is configurable. It
/// authenticates as its ServiceAccount, with Tekton's own RBAC (config/200-clusterrole.yaml and
/// the rest, applied as shipped), as in a real install.
pub fn start_controller(work: &Path, kubectl: &Kubectl, tools: &Tools) -> Daemon {
    let (namespace, name) = CONTROLLER_SA;
    let controller =
        kubectl.as_service_account(namespace, name, &work.join("controller.kubeconfig"));
    let mut cmd = Command::new(tools.path("tekton-controller"));
    cmd.arg("-kubeconfig")
        .arg(&controller.kubeconfig)
        .arg("-disable-ha")
        .args(["-entrypoint-image", ENTRYPOINT_IMAGE])
        .args(["-shell-image", SHELL_IMAGE]);
    for (flag, image) in UNMAPPED_IMAGES {
        cmd.args([flag, image]);
    }
    cmd.env("SYSTEM_NAMESPACE", "tekton-pipelines")
        .env("KUBERNETES_MIN_VERSION", "v1.28.0")
        .env("CONFIG_DEFAULTS_NAME", "config-defaults")
        .env("CONFIG_LOGGING_NAME", "config-logging")
        .env("CONFIG_OBSERVABILITY_NAME", "config-observability")
        .env("CONFIG_FEATURE_FLAGS_NAME", "feature-flags")
        .env(
            "CONFIG_LEADERELECTION_NAME",
            "config-leader-election-controller",
        )
        .env("CONFIG_SPIRE", "config-spire")
        .env("METRICS_DOMAIN", "tekton.dev/pipeline")
        .env("PROBES_PORT", free_port().to_string())
        .env("PROFILING_PORT", free_port().to_string());
    let mut daemon = Daemon::start("Tekton controller", cmd, work.join("controller.log"));
    daemon.wait_for_log(
        "pipeline.pkg.reconciler.taskrun.Reconciler\",\"knative.dev/kind\"",
        Duration::from_secs(120),
    );
    daemon
}

/// Tekton's remote resolvers (`cmd/resolvers`: bundles, cluster, git, hub, http) as a host
/// process, with the environment of Tekton's config/resolvers/resolvers-deployment.yaml, as
/// their ServiceAccount (config/resolvers' RBAC, applied as shipped).
///
/// Like the controller, knative's sharedmain in it serves health probes on port 8080, hard-coded;
/// in a cluster each has its own Pod network. Here `podnet` (tests/runtime/standins/podnet)
/// gives the resolvers a network namespace of their own, with the API server's address
/// forwarded into it (the only address they can reach: none of the resolutions here needs more).
pub fn start_resolvers(work: &Path, kubectl: &Kubectl, tools: &Tools) -> Daemon {
    let (namespace, name) = RESOLVERS_SA;
    let resolvers = kubectl.as_service_account(namespace, name, &work.join("resolvers.kubeconfig"));
    let mut cmd = Command::new(tools.path("podnet"));
    cmd.arg("--forward")
        .arg(kubectl.server_address())
        .arg("--")
        .arg(tools.path("tekton-resolvers"))
        .arg("-kubeconfig")
        .arg(&resolvers.kubeconfig);
    cmd.env("SYSTEM_NAMESPACE", namespace)
        .env("KUBERNETES_MIN_VERSION", "v1.28.0")
        .env("CONFIG_LOGGING_NAME", "config-logging")
        .env("CONFIG_OBSERVABILITY_NAME", "config-observability")
        .env("CONFIG_FEATURE_FLAGS_NAME", "feature-flags")
        .env(
            "CONFIG_LEADERELECTION_NAME",
            "config-leader-election-resolvers",
        )
        .env("METRICS_DOMAIN", "tekton.dev/resolution")
        .env("PROBES_PORT", "8080")
        .env("TEKTON_HUB_API", "")
        .env("ARTIFACT_HUB_API", "https://artifacthub.io/");
    let mut daemon = Daemon::start("Tekton resolvers", cmd, work.join("resolvers.log"));
    // Each resolver reconciles once it leads its lease (a fresh one: at once).
    daemon.wait_for_log(
        r#"has started leading \"controller.tektonresolverframework.cluster."#,
        Duration::from_secs(120),
    );
    daemon
}

/// The TaskRun conversion webhook (tests/runtime/standins/tektonconversion, Tekton's own
/// conversion code), registered on the TaskRun CRD in place of `conversion: None`.
pub fn start_conversion(
    work: &Path,
    kubectl: &Kubectl,
    cert: &Path,
    key: &Path,
    ca_b64: &str,
    tools: &Tools,
) -> Daemon {
    let port = free_port();
    let mut cmd = Command::new(tools.path("tekton-conversion"));
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key);
    let mut daemon = Daemon::start(
        "Tekton conversion webhook",
        cmd,
        work.join("conversion.log"),
    );
    daemon.wait_for_log("serving", Duration::from_secs(30));
    let patch = json!({"spec": {"conversion": {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca_b64},
        },
    }}});
    kubectl.ok(
        &[
            "patch",
            "crd",
            "taskruns.tekton.dev",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ],
        "register the conversion webhook on the TaskRun CRD",
    );
    // The apiserver picks the new conversion up asynchronously: read a v1beta1 list until it
    // answers (conversion is only called for objects, so this checks the CRD is served).
    poll(
        "TaskRuns served as v1beta1 after the conversion change",
        Duration::from_secs(30),
        || {
            kubectl
                .get(&["taskruns.v1beta1.tekton.dev", "-A"])
                .map(|_| ())
        },
    );
    daemon
}
