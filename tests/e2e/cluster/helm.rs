//! Setup: `helm` against the test cluster, the chart's install and upgrade, its webhooks
//! compared with deploy/'s, and a kubeconfig for the chart's ServiceAccount.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::kube::{Cluster, Out, run};
use crate::tools::tools;

use super::objects::{example, yaml_docs, yaml_values};

/// `helm` against the test cluster.
pub(super) fn helm(cluster: &Cluster, args: &[&str]) -> Out {
    let mut cmd = Command::new(tools().path("helm"));
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(&cluster.kubectl.kubeconfig)
        .current_dir(crate::root());
    run(cmd, None)
}

pub(super) const RELEASE: &str = "bookend";
pub(super) const RELEASE_NAMESPACE: &str = "bookend-system";

/// `helm install bookend charts/bookend`: the chart's defaults, except that the webhooks call
/// `bookend serve` on this machine (`webhook.url`) and the certificate is the test's own
/// (`tls.generate=false`, `tls.caBundle`). Nothing runs the Deployment (no kubelet): bookend
/// runs outside, as the chart's ServiceAccount. `extra`: more `--set`s.
pub(super) fn helm_install(cluster: &Cluster, port: u16, ca_b64: &str, extra: &[&str]) -> Out {
    let url = format!("webhook.url=https://127.0.0.1:{port}");
    let ca = format!("tls.caBundle={ca_b64}");
    let args = [
        &[
            "install",
            RELEASE,
            "charts/bookend",
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
            "--set",
            &url,
            "--set",
            "tls.generate=false",
            "--set",
            &ca,
        ],
        extra,
    ]
    .concat();
    helm(cluster, &args)
}

/// `helm upgrade bookend charts/bookend --reuse-values` and `extra` (`--set`s): the release as
/// installed, with the chart's templates applied again.
pub(super) fn helm_upgrade(cluster: &Cluster, extra: &[&str]) -> Out {
    let args = [
        &[
            "upgrade",
            RELEASE,
            "charts/bookend",
            "--namespace",
            RELEASE_NAMESPACE,
            "--reuse-values",
        ],
        extra,
    ]
    .concat();
    helm(cluster, &args)
}

/// Checks that the webhook configurations the chart installed are deploy/base/webhooks.yaml
/// (the chart rendered for kustomize) in everything but clientConfig, which must call
/// `https://127.0.0.1:<port><the Service path>` with `ca_b64`.
pub(super) fn check_installed_webhooks(cluster: &Cluster, port: u16, ca_b64: &str) {
    let manifest = helm(
        cluster,
        &["get", "manifest", RELEASE, "--namespace", RELEASE_NAMESPACE],
    )
    .expect_ok("helm get manifest");
    let key = |v: &Value| format!("{}/{}", v["kind"], v["metadata"]["name"]);
    let mut ours: Vec<Value> = yaml_values(&manifest.stdout)
        .into_iter()
        .filter(|v| {
            v["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        })
        .collect();
    let mut base = yaml_docs(&example("deploy/base/webhooks.yaml"));
    assert_eq!(
        ours.len(),
        2,
        "the chart installs two webhook configurations"
    );
    assert_eq!(
        base.len(),
        2,
        "deploy/base/webhooks.yaml has two configurations"
    );
    ours.sort_by_key(key);
    base.sort_by_key(key);
    for (ours, base) in ours.iter_mut().zip(base.iter_mut()) {
        assert_eq!(key(ours), key(base));
        let ours_hooks = ours["webhooks"].as_array_mut().expect("webhooks");
        let base_hooks = base["webhooks"].as_array_mut().expect("webhooks");
        assert_eq!(
            ours_hooks.len(),
            base_hooks.len(),
            "{}: webhook count",
            key(base)
        );
        for (o, b) in ours_hooks.iter_mut().zip(base_hooks.iter_mut()) {
            let path = b["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: service.path in deploy/", b["name"]))
                .to_owned();
            assert_eq!(
                o["clientConfig"],
                json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_b64}),
                "webhook {}: clientConfig",
                b["name"]
            );
            o.as_object_mut().unwrap().remove("clientConfig");
            b.as_object_mut().unwrap().remove("clientConfig");
        }
        assert_eq!(
            ours["webhooks"], base["webhooks"],
            "the installed webhooks differ from deploy/'s in more than clientConfig"
        );
    }
}

/// A kubeconfig for `bookend serve` that authenticates as the chart's ServiceAccount (a token
/// from the TokenRequest API), so the chart's RBAC is what bookend gets.
pub(super) fn service_account_kubeconfig(cluster: &Cluster, path: &Path) -> PathBuf {
    cluster
        .kubectl
        .as_service_account(RELEASE_NAMESPACE, RELEASE, path)
        .kubeconfig
}
