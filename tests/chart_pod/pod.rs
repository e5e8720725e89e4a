//! The kubelet's part for one Pod: its image's root filesystem, its volumes, its network, the
//! runc configuration its securityContext and resources make, and what the kernel then says
//! about the running process.

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::dockerfile::stages;
use crate::host::{is_static_elf, on_path};
use crate::kube::{Kubectl, poll, run, tail};
use crate::tools::tools;

/// `None` when skipped on purpose (`BOOKEND_SKIP_RUNTIME=1`, as the runtime suite); else the
/// path of runc, or a panic naming what is missing.
pub fn prerequisites() -> Option<PathBuf> {
    if std::env::var("BOOKEND_SKIP_RUNTIME").is_ok_and(|v| v == "1") {
        println!(
            "\n************************************************************************\n\
             SKIP chart_pod: BOOKEND_SKIP_RUNTIME=1. The chart's Pod was NOT run from\n\
             the image's contents; nothing here proves the chart's Pod works.\n\
             ************************************************************************\n"
        );
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0");
    let mut missing = Vec::new();
    if !root {
        missing.push("root (runc, network namespaces, veth)".to_owned());
    }
    for tool in ["runc", "ip", "nsenter"] {
        if on_path(tool).is_none() {
            missing.push(format!(
                "{tool} on the PATH (Debian/Ubuntu: apt-get install runc iproute2 util-linux)"
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "tests/chart_pod needs:\n  - {}\nor skip it explicitly with BOOKEND_SKIP_RUNTIME=1 \
         (docs/testing.md)",
        missing.join("\n  - ")
    );
    on_path("runc")
}

/// The image's root filesystem, assembled as the Dockerfile's final stage assembles it.
pub struct Image {
    pub rootfs: PathBuf,
    pub entrypoint: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    /// The environment the base image sets.
    pub env: Vec<String>,
    binary: PathBuf,
    destination: String,
    /// Libraries copied in because the binary is dynamically linked (empty when it is static,
    /// as the Dockerfile's musl build is).
    added_libraries: Vec<String>,
}

impl Image {
    pub fn assemble(dir: &Path, dockerfile: &Path) -> Self {
        let text = std::fs::read_to_string(dockerfile).expect("read the Dockerfile");
        let stages = stages(&text);
        let image = stages.last().expect("a final stage");
        assert!(
            image.from.starts_with("gcr.io/distroless/static"),
            "this test assembles distroless static's contents; the Dockerfile's final stage is \
             FROM {}",
            image.from
        );
        let only = |keyword: &str| -> String {
            let found: Vec<&String> = image
                .instructions
                .iter()
                .filter(|(k, _)| k == keyword)
                .map(|(_, a)| a)
                .collect();
            assert_eq!(found.len(), 1, "one {keyword} in the final stage");
            found[0].clone()
        };
        let copy = only("COPY");
        let destination = copy
            .split_whitespace()
            .last()
            .expect("COPY <src> <dest>")
            .to_owned();
        let user = only("USER");
        let (uid, gid) = user.split_once(':').unwrap_or((&user, &user));
        let (uid, gid): (u32, u32) = (
            uid.parse().expect("numeric USER"),
            gid.parse().expect("numeric group"),
        );
        let entrypoint: Vec<String> =
            serde_json::from_str(&only("ENTRYPOINT")).expect("ENTRYPOINT in exec form");

        let rootfs = dir.join("rootfs");
        // What distroless static-debian12:nonroot holds that a process may look at: its users
        // and /tmp. No shell, no libc. (Its nonroot user's home directory is left out: bookend
        // reads nothing from a home.)
        for sub in ["etc", "tmp"] {
            std::fs::create_dir_all(rootfs.join(sub)).expect("mkdir rootfs");
        }
        std::fs::write(
            rootfs.join("etc/passwd"),
            "root:x:0:0:root:/root:/sbin/nologin\n\
             nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
             nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n",
        )
        .expect("passwd");
        std::fs::write(
            rootfs.join("etc/group"),
            "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
        )
        .expect("group");
        chmod(&rootfs.join("tmp"), 0o1777);

        let binary = std::env::var_os("BOOKEND_IMAGE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bookend")));
        let target = rootfs.join(destination.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().expect("a directory")).expect("mkdir");
        std::fs::copy(&binary, &target).expect("copy the binary into the image");
        chmod(&target, 0o555);
        let mut added_libraries = Vec::new();
        if !is_static_elf(&binary) {
            // The Dockerfile's binary is static (musl); a glibc build needs its loader and
            // libraries, copied to where the binary looks for them.
            let out = Command::new("ldd").arg(&binary).output().expect("ldd");
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let path = match line.split_once("=> ") {
                    Some((_, rest)) => rest.split_whitespace().next(),
                    None => line
                        .split_whitespace()
                        .next()
                        .filter(|p| p.starts_with('/')),
                };
                let Some(path) = path.filter(|p| p.starts_with('/')) else {
                    continue;
                };
                let copy = rootfs.join(path.trim_start_matches('/'));
                std::fs::create_dir_all(copy.parent().expect("a directory")).expect("mkdir");
                std::fs::copy(path, &copy).expect("copy a library");
                added_libraries.push(path.to_owned());
            }
        }
        Self {
            rootfs,
            entrypoint,
            uid,
            gid,
            env: vec![
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            ],
            binary,
            destination,
            added_libraries,
        }
    }

    pub fn describe(&self) -> String {
        let linking = if self.added_libraries.is_empty() {
            "static, nothing else added".to_owned()
        } else {
            format!(
                "dynamically linked: added {} (the Dockerfile's musl build needs none)",
                self.added_libraries.join(", ")
            )
        };
        format!(
            "{} at {}, USER {}:{}, ENTRYPOINT {:?}; {linking}",
            self.binary.display(),
            self.destination,
            self.uid,
            self.gid,
            self.entrypoint
        )
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The Pod's address: a /30 of its own, the host's end of the veth pair and the Pod's.
pub struct PodNetwork {
    pub pod_ip: String,
    host_ip: String,
    host_link: String,
}

impl PodNetwork {
    /// A subnet and link name from this process's id, so parallel runs do not collide.
    pub fn choose() -> Self {
        static PODS: AtomicU32 = AtomicU32::new(0);
        let pod = PODS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let (second, third) = (213 + pod % 40, pid % 250 + 1);
        Self {
            pod_ip: format!("10.{second}.{third}.2"),
            host_ip: format!("10.{second}.{third}.1"),
            host_link: format!("bk{}p{pod}", pid % 100_000),
        }
    }

    /// A veth pair into the network namespace of process `pid`: `eth0` with the Pod IP inside,
    /// the host's end beside it, so the host (the API server, the probes) reaches the Pod IP.
    fn attach(&self, pid: u32) {
        let ip = |args: &[&str]| {
            let mut cmd = Command::new("ip");
            cmd.args(args);
            run(cmd, None).expect_ok(&format!("ip {}", args.join(" ")));
        };
        let inside = |args: &[&str]| {
            let mut cmd = Command::new("nsenter");
            cmd.args(["-t", &pid.to_string(), "-n", "ip"]).args(args);
            run(cmd, None).expect_ok(&format!("ip {} in the Pod", args.join(" ")));
        };
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .stderr(Stdio::null())
            .status();
        ip(&[
            "link",
            "add",
            &self.host_link,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid.to_string(),
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", self.host_ip),
            "dev",
            &self.host_link,
        ]);
        ip(&["link", "set", &self.host_link, "up"]);
        inside(&["addr", "add", &format!("{}/30", self.pod_ip), "dev", "eth0"]);
        inside(&["link", "set", "eth0", "up"]);
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .stderr(Stdio::null())
            .status();
    }
}

/// A Kubernetes quantity as a number of base units (`128Mi`, `500m`, `2`).
fn quantity(text: &str) -> f64 {
    let units = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("m", 1e-3),
    ];
    for (suffix, factor) in units {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().expect("a quantity") * factor;
        }
    }
    text.parse().expect("a quantity")
}

/// Syscalls the container runtimes' default seccomp profile (RuntimeDefault) refuses to a
/// container without capabilities. The real profile is an allow-list; this deny-list of the
/// calls it leaves out stands in for it (runc applies it the same way).
const RUNTIME_DEFAULT_DENIED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "finit_module",
    "init_module",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "move_mount",
    "name_to_handle_at",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "quotactl",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "sysfs",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
];

/// Capabilities a container runtime grants by default, before the securityContext's drop/add.
const DEFAULT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// A securityContext field from the container, else from the Pod.
fn security<'a>(container: &'a Value, pod: &'a Value, field: &str) -> &'a Value {
    let own = &container["securityContext"][field];
    if own.is_null() { &pod[field] } else { own }
}

/// The Pod, created in the API server and run under runc in its own network namespace.
pub struct PodRun {
    pub pod_name: String,
    pub log: PathBuf,
    child: Child,
    runc: PathBuf,
    runc_root: PathBuf,
    id: String,
    pod_ip: String,
    namespace: String,
    // After the container: the host's end of the Pod's veth pair.
    network: Option<PodNetwork>,
}

/// Whether the Pod can reach the API server (a replica that never gets ready cannot).
#[derive(Clone, Copy)]
pub enum Api {
    Reachable,
    Unreachable,
}

/// The pretend node Pods are bound to.
pub const NODE: &str = "chart-pod-node";

impl PodRun {
    /// Creates a Pod from `template`, bound to the pretend node (as the ReplicaSet controller and
    /// the scheduler would leave it), and starts it.
    pub fn create_and_start(
        work: &Path,
        kubectl: &Kubectl,
        runc: &Path,
        image: &Image,
        template: &Value,
        net: PodNetwork,
        namespace: &str,
    ) -> Self {
        let name = format!(
            "{}-chart-pod",
            template["metadata"]["labels"]["app.kubernetes.io/instance"]
                .as_str()
                .unwrap_or("bookend")
        );
        let mut spec = template["spec"].clone();
        spec["nodeName"] = json!(NODE);
        let pod = kubectl.create(&json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": template["metadata"]["labels"],
                "annotations": template["metadata"]["annotations"],
            },
            "spec": spec,
        }));
        Self::start(work, kubectl, runc, image, &pod, net, Api::Reachable)
    }

    /// Runs the stored Pod `pod` (bound to this node) as a kubelet would.
    pub fn start(
        work: &Path,
        kubectl: &Kubectl,
        runc: &Path,
        image: &Image,
        pod: &Value,
        net: PodNetwork,
        api_reach: Api,
    ) -> Self {
        let spec = &pod["spec"];
        let containers = spec["containers"].as_array().expect("containers");
        assert_eq!(containers.len(), 1, "the chart's Pod has one container");
        assert!(
            spec["initContainers"].is_null(),
            "init containers are not emulated here"
        );
        let container = &containers[0];
        let pod_security = &spec["securityContext"];
        let pod_name = pod["metadata"]["name"].as_str().expect("name").to_owned();
        let namespace = pod["metadata"]["namespace"].as_str().expect("namespace");
        let pod_uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();

        let bundle = work.join(&pod_name);
        let volumes = bundle.join("volumes");
        std::fs::create_dir_all(&volumes).expect("mkdir volumes");
        let fs_group = pod_security["fsGroup"].as_u64().map(|g| g as u32);

        // Volumes, written as the kubelet writes them.
        let mut mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc"}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
            json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
            json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
            json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
            json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
        ];
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            let name = volume["name"].as_str().expect("volume name");
            let dir = volumes.join(name);
            if let Some(secret) = volume["secret"].as_object() {
                let secret_name = secret["secretName"].as_str().expect("secretName");
                let object = kubectl
                    .get(&["secret", secret_name, "-n", namespace])
                    .unwrap_or_else(|e| panic!("Secret {secret_name}: {e}"));
                let files: Vec<(String, Vec<u8>)> = object["data"]
                    .as_object()
                    .expect("Secret data")
                    .iter()
                    .map(|(k, v)| {
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(v.as_str().expect("base64"))
                            .expect("base64");
                        (k.clone(), bytes)
                    })
                    .collect();
                let mode = secret
                    .get("defaultMode")
                    .and_then(Value::as_u64)
                    .unwrap_or(0o644) as u32;
                atomic_volume(&dir, &files, mode, fs_group);
            } else {
                panic!("volume {name}: only Secret volumes are emulated here: {volume}");
            }
        }
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let name = mount["name"].as_str().expect("mount name");
            assert!(mount["subPath"].is_null(), "subPath is not emulated");
            let mode = if mount["readOnly"] == json!(true) {
                "ro"
            } else {
                "rw"
            };
            mounts.push(json!({
                "destination": mount["mountPath"], "type": "bind",
                "source": volumes.join(name), "options": ["rbind", mode],
            }));
        }

        // The ServiceAccount token the kubelet projects (kube-api-access-*): a TokenRequest
        // bound to this Pod, the API server's CA, the namespace; mode 0644, group fsGroup.
        let account = spec["serviceAccountName"].as_str().unwrap_or("default");
        if spec["automountServiceAccountToken"] != json!(false) {
            let token = kubectl
                .ok(
                    &[
                        "create",
                        "token",
                        account,
                        "-n",
                        namespace,
                        "--bound-object-kind=Pod",
                        &format!("--bound-object-name={pod_name}"),
                        &format!("--bound-object-uid={pod_uid}"),
                        "--duration=1h",
                    ],
                    "a token bound to the Pod",
                )
                .stdout
                .trim()
                .to_owned();
            let config = kubectl
                .ok(&["config", "view", "--raw", "-o", "json"], "kubeconfig")
                .json();
            let cluster = &config["clusters"][0]["cluster"];
            let ca = match cluster["certificate-authority-data"].as_str() {
                Some(data) => base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .expect("CA data"),
                None => std::fs::read(
                    cluster["certificate-authority"]
                        .as_str()
                        .expect("a CA in the kubeconfig"),
                )
                .expect("read the CA"),
            };
            let dir = volumes.join("kube-api-access");
            atomic_volume(
                &dir,
                &[
                    ("token".to_owned(), token.into_bytes()),
                    ("ca.crt".to_owned(), ca),
                    ("namespace".to_owned(), namespace.as_bytes().to_vec()),
                ],
                0o644,
                fs_group,
            );
            mounts.push(json!({
                "destination": "/var/run/secrets/kubernetes.io/serviceaccount", "type": "bind",
                "source": dir, "options": ["rbind", "ro"],
            }));
        }
        // /etc/hosts and the termination log, as the kubelet mounts them.
        let hosts = bundle.join("etc-hosts");
        std::fs::write(
            &hosts,
            format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{}\t{pod_name}\n",
                net.pod_ip
            ),
        )
        .expect("hosts");
        mounts.push(json!({"destination": "/etc/hosts", "type": "bind", "source": hosts, "options": ["bind", "rw"]}));
        let termination = bundle.join("termination-log");
        std::fs::write(&termination, b"").expect("termination-log");
        chmod(&termination, 0o666);
        mounts.push(json!({
            "destination": container["terminationMessagePath"].as_str().unwrap_or("/dev/termination-log"),
            "type": "bind", "source": termination, "options": ["bind", "rw"],
        }));

        // The process: ENTRYPOINT (or command) and args; the environment.
        let mut args: Vec<String> = match container["command"].as_array() {
            Some(command) => command
                .iter()
                .map(|a| a.as_str().expect("string").to_owned())
                .collect(),
            None => image.entrypoint.clone(),
        };
        for arg in container["args"].as_array().into_iter().flatten() {
            let arg = arg.as_str().expect("string");
            assert!(
                !arg.contains("$("),
                "$(VAR) expansion is not emulated: {arg}"
            );
            args.push(arg.to_owned());
        }
        let api = kubectl.server_address();
        let (api_host, api_port) = api.rsplit_once(':').expect("host:port");
        let mut env = image.env.clone();
        env.push(format!("HOSTNAME={pod_name}"));
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().expect("env name");
            let value = if let Some(value) = var["value"].as_str() {
                value.to_owned()
            } else {
                match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => pod_name.clone(),
                    Some("metadata.namespace") => namespace.to_owned(),
                    Some("status.podIP") => net.pod_ip.clone(),
                    _ => panic!("env {name}: not emulated: {var}"),
                }
            };
            env.push(format!("{name}={value}"));
        }
        // Set for every Pod, enableServiceLinks or not: where the in-cluster client finds the
        // API server (forwarded into the Pod's network namespace by podnet).
        env.push(format!("KUBERNETES_SERVICE_HOST={api_host}"));
        env.push(format!(
            "KUBERNETES_SERVICE_PORT={}",
            match api_reach {
                Api::Reachable => api_port,
                // Nothing listens on port 1 in the Pod's network namespace.
                Api::Unreachable => "1",
            }
        ));

        // securityContext, container over Pod; the image's USER when runAsUser is unset.
        let uid = security(container, pod_security, "runAsUser")
            .as_u64()
            .map_or(image.uid, |u| u as u32);
        let gid = security(container, pod_security, "runAsGroup")
            .as_u64()
            .map_or(image.gid, |g| g as u32);
        if security(container, pod_security, "runAsNonRoot") == &json!(true) {
            assert_ne!(
                uid, 0,
                "runAsNonRoot with uid 0: the kubelet refuses to start it"
            );
        }
        let drop: Vec<&str> = container["securityContext"]["capabilities"]["drop"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let add: Vec<String> = container["securityContext"]["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|c| format!("CAP_{c}"))
            .collect();
        let mut capabilities: Vec<String> = if drop.contains(&"ALL") {
            Vec::new()
        } else {
            DEFAULT_CAPABILITIES
                .iter()
                .filter(|c| !drop.iter().any(|d| c.strip_prefix("CAP_") == Some(d)))
                .map(|c| (*c).to_owned())
                .collect()
        };
        capabilities.extend(add);
        let no_new_privileges =
            container["securityContext"]["allowPrivilegeEscalation"] == json!(false);
        let read_only_root = container["securityContext"]["readOnlyRootFilesystem"] == json!(true);
        let seccomp = match security(container, pod_security, "seccompProfile")["type"].as_str() {
            Some("RuntimeDefault") => Some(json!({
                "defaultAction": "SCMP_ACT_ALLOW",
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                "syscalls": [{"names": RUNTIME_DEFAULT_DENIED, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
            })),
            None | Some("Unconfined") => None,
            Some(other) => panic!("seccompProfile {other} is not emulated"),
        };
        let limits = &container["resources"]["limits"];
        let requests = &container["resources"]["requests"];
        let mut resources = json!({"devices": [{"allow": false, "access": "rwm"}]});
        if let Some(memory) = limits["memory"].as_str() {
            resources["memory"] = json!({"limit": quantity(memory) as i64});
        }
        if let Some(cpu) = limits["cpu"].as_str() {
            resources["cpu"] =
                json!({"quota": (quantity(cpu) * 100_000.0) as i64, "period": 100_000});
        }
        if let Some(cpu) = requests["cpu"].as_str() {
            resources["cpu"]["shares"] = json!(((quantity(cpu) * 1024.0) as u64).max(2));
        }
        let id = format!("bookend-{}-{pod_name}", std::process::id());
        let mut process = json!({
            "terminal": false,
            "user": {"uid": uid, "gid": gid},
            "args": args,
            "env": env,
            "cwd": "/",
            "capabilities": {
                "bounding": capabilities, "effective": capabilities,
                "permitted": capabilities, "ambient": [], "inheritable": [],
            },
            "noNewPrivileges": no_new_privileges,
        });
        if let Some(group) = fs_group {
            process["user"]["additionalGids"] = json!([group]);
        }
        let mut linux = json!({
            // No network namespace here: the container keeps podnet's, the Pod's.
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "cgroupsPath": format!("/{id}"),
            "resources": resources,
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
            ],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        });
        if let Some(seccomp) = seccomp {
            linux["seccomp"] = seccomp;
        }
        let config = json!({
            "ociVersion": "1.0.2",
            "process": process,
            "root": {"path": image.rootfs, "readonly": read_only_root},
            "hostname": pod_name,
            "mounts": mounts,
            "linux": linux,
        });
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&config).expect("json"),
        )
        .expect("config.json");

        let runc_root = work.join("runc");
        let log = work.join(format!("{pod_name}.log"));
        let file = std::fs::File::create(&log).expect("Pod log");
        let child = Command::new(tools().path("podnet"))
            .arg("--forward")
            .arg(&api)
            .arg("--")
            .arg(runc)
            .arg("--root")
            .arg(&runc_root)
            .args(["run", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("spawn podnet + runc");
        let mut run = Self {
            pod_name,
            log,
            child,
            runc: runc.to_owned(),
            runc_root,
            id,
            pod_ip: net.pod_ip.clone(),
            namespace: namespace.to_owned(),
            network: None,
        };
        // podnet unshares its network namespace first thing; then the veth goes in.
        let pid = run.child.id();
        let own = std::fs::read_link("/proc/self/ns/net").expect("own netns");
        poll(
            "podnet's network namespace",
            Duration::from_secs(10),
            || {
                run.check_running();
                match std::fs::read_link(format!("/proc/{pid}/ns/net")) {
                    Ok(ns) if ns != own => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        );
        net.attach(pid);
        run.network = Some(net);
        run
    }

    pub fn pod_ip(&self) -> &str {
        &self.pod_ip
    }

    /// Whether the Pod's process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Panics with the Pod's log if it is no longer running.
    pub fn check_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "the chart's Pod exited ({status}):\n{}",
                tail(&self.log, 40)
            );
        }
    }

    /// What a kubelet reports of a running Pod: Running, its IP, and Ready as the readiness
    /// probe last answered.
    pub fn report(&self, kubectl: &Kubectl, ready: bool) -> Result<(), String> {
        let ready = if ready { "True" } else { "False" };
        let patch = json!({"status": {
            "phase": "Running",
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": ready},
                {"type": "Ready", "status": ready},
            ],
        }});
        kubectl
            .run(
                &[
                    "patch",
                    "pod",
                    &self.pod_name,
                    "-n",
                    &self.namespace,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &patch.to_string(),
                ],
                None,
            )
            .succeeded()
            .map_err(|e| format!("report the status of Pod {}: {e}", self.pod_name))
    }

    fn container_pid(&self) -> u32 {
        let out = Command::new(&self.runc)
            .arg("--root")
            .arg(&self.runc_root)
            .args(["state", &self.id])
            .output()
            .expect("runc state");
        let state: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("runc state: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        state["pid"].as_u64().expect("pid") as u32
    }

    /// The container's process as the kernel sees it against the securityContext.
    pub fn check_process(&self, container: &Value, pod_security: &Value) {
        let pid = self.container_pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let field = |name: &str| -> String {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let uid = security(container, pod_security, "runAsUser")
            .as_u64()
            .expect("runAsUser");
        let gid = security(container, pod_security, "runAsGroup")
            .as_u64()
            .expect("runAsGroup");
        assert_eq!(field("Uid"), format!("{uid} {uid} {uid} {uid}"));
        assert_eq!(field("Gid"), format!("{gid} {gid} {gid} {gid}"));
        if let Some(group) = pod_security["fsGroup"].as_u64() {
            assert!(
                field("Groups").split(' ').any(|g| g == group.to_string()),
                "fsGroup {group} is a supplementary group: {}",
                field("Groups")
            );
        }
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(field(set), "0000000000000000", "{set}: no capabilities");
        }
        assert_eq!(field("NoNewPrivs"), "1", "allowPrivilegeEscalation: false");
        assert_eq!(field("Seccomp"), "2", "a seccomp filter");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let cmdline: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let expected: Vec<String> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string").to_owned())
            .collect();
        assert_eq!(
            cmdline[1..],
            expected[..],
            "the chart's args after ENTRYPOINT"
        );
        let mountinfo =
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
        let options = |point: &str| -> String {
            mountinfo
                .lines()
                .rev()
                .map(|l| l.split(' ').collect::<Vec<_>>())
                // The last mount on a point is the one the process sees.
                .find(|f| f.get(4) == Some(&point))
                .map(|f| f[5].to_owned())
                .unwrap_or_else(|| panic!("{point} not mounted in the container"))
        };
        assert!(
            options("/").split(',').any(|o| o == "ro"),
            "readOnlyRootFilesystem: / is {}",
            options("/")
        );
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let point = mount["mountPath"].as_str().expect("mountPath");
            if mount["readOnly"] == json!(true) {
                assert!(
                    options(point).split(',').any(|o| o == "ro"),
                    "{point} read-only: {}",
                    options(point)
                );
            }
        }
    }

    /// SIGTERM to the Pod (podnet passes it to runc, runc to bookend); its exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        // terminationGracePeriodSeconds of the chart is 30 s; the kubelet would SIGKILL after.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                return self.child.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PodRun {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the chart's Pod (tail)\n{}", tail(&self.log, 40));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = Command::new(&self.runc)
            .arg("--root")
            .arg(&self.runc_root)
            .args(["delete", "--force", &self.id])
            .stderr(Stdio::null())
            .status();
    }
}

/// A volume as the kubelet's atomic writer lays it out: the files in a timestamped directory,
/// `..data` pointing at it, and each name a link through `..data` (how a renewed Secret is
/// swapped in at once). Files have `mode`; with an fsGroup they belong to that group.
fn atomic_volume(dir: &Path, files: &[(String, Vec<u8>)], mode: u32, fs_group: Option<u32>) {
    let generation = dir.join("..2026_01_01_00_00_00.000000001");
    std::fs::create_dir_all(&generation).expect("mkdir volume");
    for (name, bytes) in files {
        let file = generation.join(name);
        std::fs::write(&file, bytes).expect("write volume file");
        chmod(&file, mode);
        if let Some(group) = fs_group {
            chown(&file, Some(0), Some(group)).expect("chown");
        }
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).expect("link");
    }
    std::os::unix::fs::symlink(generation.file_name().expect("name"), dir.join("..data"))
        .expect("..data");
    for d in [dir, &generation] {
        chmod(d, 0o755);
        if let Some(group) = fs_group {
            chown(d, Some(0), Some(group)).expect("chown");
        }
    }
}
