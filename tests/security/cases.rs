//! The policies, Tasks and TaskRuns of the attack classes, with the answer each must get. Data
//! only (no engine), so that the e2e suite sends the same TaskRuns through a real
//! kube-apiserver.

use serde_json::{Value, json};

/// The org's policies (credentials first; an SBOM and its upload last, even after a failure),
/// a team's StepPolicy in `team-a`, and policies that refuse or skip referenced Tasks in their
/// own namespaces, and one that lets Tasks mount workspaces anywhere but over system
/// directories and its steps' own (in namespace `open`); in `sealed-net`, one policy that runs
/// the TaskRun's own steps without network and one that does not (the strict one wins).
pub const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-creds}
spec:
  priority: 10
  match: {namespaces: ["team-*"]}
  preSteps:
    - name: bookend-creds
      image: registry.example/creds:1.0
      command: ["/usr/local/bin/creds"]
      args: ["--out", "/bookend/creds"]
      env: [{name: CREDS_MODE, value: strict}]
      securityContext: {allowPrivilegeEscalation: false, runAsNonRoot: true}
      volumeMounts: [{name: bookend-creds-vol, mountPath: /bookend}]
  volumes: [{name: bookend-creds-vol, emptyDir: {}}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-sbom}
spec:
  priority: 20
  match: {namespaces: ["team-*"]}
  postStepsRun: Always
  postSteps:
    - name: bookend-sbom
      image: registry.example/syft:1.0
      command: ["/syft"]
      args: ["dir:/workspace", "-o", "/sbom/sbom.json"]
      volumeMounts: [{name: bookend-sbom-vol, mountPath: /sbom}]
    - name: bookend-upload
      image: registry.example/curl:8
      command: ["/usr/bin/curl"]
      args: ["-T", "/sbom/sbom.json", "https://sbom.example/upload"]
      volumeMounts: [{name: bookend-sbom-vol, mountPath: /sbom}]
  volumes: [{name: bookend-sbom-vol, emptyDir: {}}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: team-lint, namespace: team-a}
spec:
  preSteps: [{name: bookend-team-lint, image: registry.example/lint:2, command: ["/lint"]}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: strict-refs}
spec:
  priority: 30
  match: {namespaces: ["strict"]}
  taskRef: Deny
  remoteTaskRef: Deny
  preSteps: [{name: bookend-strict, image: registry.example/strict:1, command: ["/strict"]}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: skip-refs}
spec:
  priority: 40
  match: {namespaces: ["skip"]}
  taskRef: Skip
  preSteps: [{name: bookend-skip-pre, image: registry.example/skip:1, command: ["/skip"]}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: open-workspaces}
spec:
  match: {namespaces: ["open"]}
  workspaceMounts: Anywhere
  preSteps: [{name: bookend-open, image: registry.example/tool:1, command: ["/opt/tool/run"]}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: hermetic-steps}
spec:
  priority: 50
  match: {namespaces: ["sealed-net"]}
  userSteps: {network: None}
  postStepsRun: Always
  preSteps: [{name: bookend-fetch, image: registry.example/fetch:1, command: ["/fetch"]}]
  postSteps: [{name: bookend-publish, image: registry.example/publish:1, command: ["/publish"]}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: networked-steps}
spec:
  priority: 60
  match: {namespaces: ["sealed-net"]}
  userSteps: {network: Pod}
  postSteps: [{name: bookend-notify, image: registry.example/notify:1, command: ["/notify"]}]
"#;

/// Tasks in the namespaces the cases use (one signed).
pub const TASKS: &str = r#"
apiVersion: tekton.dev/v1
kind: Task
metadata: {name: build, namespace: team-a, resourceVersion: "7"}
spec:
  steps: [{name: compile, image: golang, script: "go build"}]
---
apiVersion: tekton.dev/v1
kind: Task
metadata: {name: build, namespace: strict}
spec:
  steps: [{name: compile, image: golang, script: "go build"}]
---
apiVersion: tekton.dev/v1
kind: Task
metadata: {name: build, namespace: skip}
spec:
  steps: [{name: compile, image: golang, script: "go build"}]
---
apiVersion: tekton.dev/v1
kind: Task
metadata:
  name: signed
  namespace: team-a
  annotations: {tekton.dev/signature: MEUCIQDforged}
spec:
  steps: [{name: compile, image: golang, script: "go build"}]
"#;

/// One attack and the answer it must get.
pub struct Case {
    /// `class/what`.
    pub name: &'static str,
    pub namespace: &'static str,
    pub taskrun: Value,
    pub expect: Expect,
}

/// The answer a case must get.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Refused, the message containing this text (it names the field).
    Denied(&'static str),
    /// Admitted with the org's steps put in (the invariant checks how).
    Injected,
    /// Admitted as it is.
    Unchanged,
}

impl Expect {
    /// Checks an engine decision (outcome `denied`, `mutated` or `allowed`, and its message).
    #[allow(dead_code)] // the e2e suite checks the apiserver's answer instead
    pub fn check(&self, case: &str, decision: &bookend::engine::Decision) {
        use bookend::engine::Outcome;
        let message = decision.message.as_deref().unwrap_or("");
        match self {
            Expect::Denied(text) => {
                assert_eq!(
                    decision.outcome,
                    Outcome::Denied,
                    "{case}: {:?}",
                    decision.patch
                );
                assert!(
                    message.contains(text),
                    "{case}: {message:?} should say {text:?}"
                );
            }
            Expect::Injected => assert_eq!(decision.outcome, Outcome::Mutated, "{case}: {message}"),
            Expect::Unchanged => {
                assert_eq!(
                    decision.outcome,
                    Outcome::Admitted,
                    "{case}: {message} {:?}",
                    decision.patch
                )
            }
        }
    }
}

/// A TaskRun with an inline spec of `steps` (and `spec` members merged in).
pub fn inline(steps: Value) -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
           "metadata": {"generateName": "attack-", "namespace": "team-a"},
           "spec": {"taskSpec": {"steps": steps}}})
}

/// A TaskRun whose spec is `spec`.
pub fn with_spec(spec: Value) -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
           "metadata": {"generateName": "attack-", "namespace": "team-a"},
           "spec": spec})
}

/// The author's ordinary build step.
pub fn build_step() -> Value {
    json!({"name": "build", "image": "golang", "script": "go build ./..."})
}

/// Every class's cases.
pub fn all() -> Vec<Case> {
    use super::classes::*;
    [
        taskref::cases(),
        lookalike::cases(),
        record::cases(),
        merged::cases(),
        names::cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}
