use super::*;
use crate::engine::Catalog;
use crate::policy::Settings;
use crate::policy::load::policy_set_from_yaml;
use base64::Engine as _;
use serde_json::json;

fn set() -> PolicySet {
    let loaded = policy_set_from_yaml(
        "t.yaml",
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: creds}
spec:
  preSteps: [{name: bookend-creds, image: alpine}]
"#,
        Settings::default(),
    );
    assert!(loaded.issues.is_empty());
    loaded.set
}

fn review_body(operation: &str, object: Value, dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "TaskRun"},
            "resource": {"group": "tekton.dev", "version": "v1", "resource": "taskruns"},
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "dryRun": dry_run
        }
    }))
    .unwrap()
}

/// A TaskRun CREATE, not a dry run.
fn create(object: Value) -> Vec<u8> {
    review_body("CREATE", object, false)
}

/// The CREATE of [`taskrun`] with `edit` applied to the whole review.
fn create_with(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&create(taskrun())).unwrap();
    edit(&mut body);
    serde_json::to_vec(&body).unwrap()
}

/// The mutating webhook's answer to `body`, with the policies of [`set`].
fn mutate(body: &[u8]) -> Reply {
    review(Endpoint::Mutate, body, &set(), &Catalog::default())
}

/// The validating webhook's answer to `body`, with the policies of [`set`].
fn validate(body: &[u8]) -> Reply {
    review(Endpoint::Validate, body, &set(), &Catalog::default())
}

fn taskrun() -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
           "metadata": {"generateName": "x-", "namespace": "team-a"},
           "spec": {"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}})
}

fn response(reply: &Reply) -> Value {
    let v: Value = serde_json::from_slice(&reply.body).unwrap();
    v["response"].clone()
}

/// The message of a refusal (`response.status.message`).
fn denial_message(reply: &Reply) -> String {
    let r = response(reply);
    assert_eq!(r["allowed"], false, "{r}");
    r["status"]["message"]
        .as_str()
        .expect("a refusal has a message")
        .to_owned()
}

fn decoded_patch(response: &Value) -> Value {
    let b64 = response["patch"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn mutate_echoes_uid_and_sends_a_base64_json_patch() {
    let reply = mutate(&create(taskrun()));
    assert!(reply.answered());
    let whole: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(whole["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(whole["kind"], "AdmissionReview");
    let r = &whole["response"];
    assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(r["allowed"], true);
    assert_eq!(r["patchType"], "JSONPatch");
    let patch = decoded_patch(r);
    // The record, the label that selects the TaskRun for post-run verification, the record
    // again as a param (for Chains' provenance), the step.
    assert_eq!(patch[1]["path"], "/metadata/labels");
    assert_eq!(patch[1]["value"], json!({"bookend.dev/verify": "true"}));
    assert_eq!(patch[2]["path"], "/spec/params");
    assert_eq!(
        patch[2]["value"],
        json!([{"name": "bookend-injected", "value": patch[0]["value"]["bookend.dev/injected"]}])
    );
    assert_eq!(patch[3]["path"], "/spec/taskSpec/steps/0");
    assert_eq!(reply.summary.outcome, Some(Outcome::Mutated));
    assert_eq!(
        reply.summary.injected,
        vec![("ClusterStepPolicy/creds".to_owned(), 1)]
    );
    assert!(
        r["auditAnnotations"]["injected"]
            .as_str()
            .unwrap()
            .contains("bookend-creds")
    );
    assert!(r.get("warnings").is_none(), "no warnings outside dry-run");
}

#[test]
fn dry_run_carries_warnings() {
    let reply = mutate(&review_body("CREATE", taskrun(), true));
    let r = response(&reply);
    assert!(r["warnings"][0].as_str().unwrap().contains("bookend-creds"));
    assert!(reply.summary.dry_run);
}

#[test]
fn updates_deletes_and_status_are_allowed_untouched() {
    for op in ["UPDATE", "DELETE", "CONNECT"] {
        let r = response(&mutate(&review_body(op, taskrun(), false)));
        assert_eq!(r["allowed"], true, "{op}");
        assert!(r.get("patch").is_none(), "{op}");
    }
    let reply = mutate(&create_with(|body| {
        body["request"]["subResource"] = json!("status");
    }));
    assert!(response(&reply).get("patch").is_none());
}

#[test]
fn denials_are_200_with_allowed_false_and_code_400() {
    let mut object = taskrun();
    object["spec"]["taskSpec"]["steps"][0]["name"] = json!("bookend-sneaky");
    let reply = mutate(&create(object));
    assert!(reply.answered());
    let r = response(&reply);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 400);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("reserved prefix")
    );
    assert_eq!(reply.summary.outcome, Some(Outcome::Denied));
}

#[test]
fn malformed_requests_are_400_with_a_reason() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "not a JSON AdmissionReview"),
        (br#"{"apiVersion":"v1","kind":"ConfigMap"}"#.to_vec(), "kind must be AdmissionReview"),
        (br#"{"apiVersion":"x/v9","kind":"AdmissionReview","request":{}}"#.to_vec(), "apiVersion"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), "no request"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}"#.to_vec(), "uid"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"group":"tekton.dev","version":"v1","kind":"TaskRun"}}}"#.to_vec(), "object is missing"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"group":"tekton.dev","version":"v1","kind":"TaskRun"},"object":{"kind":"Pod"}}}"#.to_vec(), "not a tekton.dev/v1 TaskRun"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#.to_vec(), "no request"),
        (br#"[1,2]"#.to_vec(), "not a JSON AdmissionReview"),
    ];
    for (body, reason) in cases {
        let reply = mutate(&body);
        assert!(!reply.answered(), "{}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&reply.body).unwrap();
        assert!(
            v["error"].as_str().unwrap().contains(reason),
            "{v} should say {reason}"
        );
        assert_eq!(reply.summary.outcome, None);
    }
}

#[test]
fn v1beta1_reviews_are_answered_in_kind() {
    let reply = mutate(&create_with(|body| {
        body["apiVersion"] = json!("admission.k8s.io/v1beta1");
    }));
    let v: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1beta1");
}

#[test]
fn the_backstop_refuses_a_taskrun_without_its_mandatory_steps() {
    let reply = validate(&create(taskrun()));
    let m = denial_message(&reply);
    assert!(m.contains("ClusterStepPolicy/creds"), "{m}");
    assert!(
        m.contains("missing /spec/taskSpec/steps/0 (bookend-creds)"),
        "{m}"
    );
    assert!(
        response(&reply).get("patch").is_none(),
        "a validating answer never patches"
    );

    // The same TaskRun after the mutating webhook passes.
    let mutated = mutate(&create(taskrun()));
    let patch: json_patch::Patch =
        serde_json::from_value(decoded_patch(&response(&mutated))).unwrap();
    let mut object = taskrun();
    json_patch::patch(&mut object, &patch).unwrap();
    let reply = validate(&create(object.clone()));
    assert_eq!(response(&reply)["allowed"], true);

    // A TaskRun created verified (the mutation skipped): refused, or the post-run watch would
    // pass it over.
    let mut marked = object.clone();
    marked["metadata"]["annotations"]["bookend.dev/verified"] = json!("{}");
    let m = denial_message(&validate(&create(marked)));
    assert!(
        m.contains("unexpected /metadata/annotations/bookend.dev~1verified"),
        "{m}"
    );

    // An injected step changed after injection is refused.
    object["spec"]["taskSpec"]["steps"][0]["image"] = json!("evil");
    let m = denial_message(&validate(&create(object)));
    assert!(
        m.contains("step \"bookend-creds\" differs from what ClusterStepPolicy/creds injects"),
        "{m}"
    );
}

/// The record param is a mark in `spec`: missing, a previous release's admission (it wrote
/// none), admitted; present but not bookend's, refused as a forged mark.
#[test]
fn the_backstop_admits_a_missing_record_param_and_refuses_a_forged_one() {
    let patch: json_patch::Patch =
        serde_json::from_value(decoded_patch(&response(&mutate(&create(taskrun()))))).unwrap();
    let mut injected = taskrun();
    json_patch::patch(&mut injected, &patch).unwrap();
    let record = injected["metadata"]["annotations"]["bookend.dev/injected"].clone();
    assert_eq!(
        injected["spec"]["params"],
        json!([{"name": "bookend-injected", "value": record}])
    );
    let mut previous_release = injected.clone();
    previous_release["spec"]
        .as_object_mut()
        .unwrap()
        .remove("params");
    assert_eq!(
        response(&validate(&create(previous_release.clone())))["allowed"],
        true
    );
    previous_release["spec"]["params"] = json!([{"name": "x", "value": "1"}]);
    assert_eq!(
        response(&validate(&create(previous_release)))["allowed"],
        true
    );
    for forged in [
        json!([{"name": "bookend-injected", "value": r#"{"policies":[]}"#}]),
        json!([{"name": "bookend-injected", "value": record}, {"name": "bookend-injected", "value": record}]),
        json!([{"name": "bookend-injected", "value": [record]}]),
    ] {
        let mut object = injected.clone();
        object["spec"]["params"] = forged.clone();
        let m = denial_message(&validate(&create(object)));
        assert!(
            m.contains("/spec/params")
                && m.contains("the param \"bookend-injected\" are bookend's alone"),
            "{forged}: {m}"
        );
    }
    // On a TaskRun no policy reaches.
    let mut elsewhere = taskrun();
    elsewhere["spec"]["params"] = json!([{"name": "bookend-injected", "value": record}]);
    let m = denial_message(&review(
        Endpoint::Validate,
        &create(elsewhere),
        &PolicySet::default(),
        &Catalog::default(),
    ));
    assert!(m.contains("unexpected /spec/params"), "{m}");
}

#[test]
fn the_backstop_refuses_marks_bookend_did_not_write() {
    let mutated = mutate(&create(taskrun()));
    let patch: json_patch::Patch =
        serde_json::from_value(decoded_patch(&response(&mutated))).unwrap();
    let mut injected = taskrun();
    json_patch::patch(&mut injected, &patch).unwrap();
    assert_eq!(
        response(&validate(&create(injected.clone())))["allowed"],
        true
    );

    // The mutation did not run (its failurePolicy is Ignore) and the author wrote what it
    // would have, but with a forged verified mark.
    let mut forged = injected.clone();
    forged["metadata"]["annotations"]["bookend.dev/verified"] = json!("{}");
    let m = denial_message(&validate(&create(forged)));
    assert!(
        m.contains("unexpected /metadata/annotations/bookend.dev~1verified")
            && m.contains("remove them and create the TaskRun again"),
        "{m}"
    );
    // Without the label or the record (what a previous release's mutation writes, during a
    // rolling upgrade): admitted, not refused (the TaskRun is not watched).
    let mut unlabelled = injected.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("bookend.dev/verify");
    assert_eq!(response(&validate(&create(unlabelled)))["allowed"], true);
    let mut unrecorded = injected.clone();
    unrecorded["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("bookend.dev/injected");
    assert_eq!(response(&validate(&create(unrecorded)))["allowed"], true);
    // A record bookend did not write on a TaskRun that carries the label (no previous release
    // writes it): forged, refused; without the label, a previous release's record: admitted.
    let mut forged_record = injected.clone();
    forged_record["metadata"]["annotations"]["bookend.dev/injected"] = json!(r#"{"policies":[]}"#);
    let m = denial_message(&validate(&create(forged_record.clone())));
    assert!(
        m.contains("changed /metadata/annotations/bookend.dev~1injected"),
        "{m}"
    );
    forged_record["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("bookend.dev/verify");
    assert_eq!(response(&validate(&create(forged_record)))["allowed"], true);
    // A label with another value, a record with another form: the author's.
    let mut relabelled = injected.clone();
    relabelled["metadata"]["labels"]["bookend.dev/verify"] = json!("no");
    let m = denial_message(&validate(&create(relabelled)));
    assert!(
        m.contains("changed /metadata/labels/bookend.dev~1verify"),
        "{m}"
    );
    // A TaskRun whose Task comes from a resolver: the mutation writes only bookend's record
    // (the steps go in at the resolution) and the label; the backstop admits exactly that,
    // and refuses a labelled one whose record is the author's.
    let mut remote = taskrun();
    remote["spec"] = json!({"taskRef": {"resolver": "git"}});
    let patch: json_patch::Patch =
        serde_json::from_value(decoded_patch(&response(&mutate(&create(remote.clone()))))).unwrap();
    let mut marked = remote.clone();
    json_patch::patch(&mut marked, &patch).unwrap();
    assert_eq!(marked["spec"]["taskRef"], remote["spec"]["taskRef"]);
    assert_eq!(
        marked["spec"]["params"],
        json!([{"name": "bookend-injected", "value": marked["metadata"]["annotations"]["bookend.dev/injected"]}])
    );
    assert_eq!(marked["metadata"]["labels"]["bookend.dev/verify"], "true");
    assert_eq!(
        response(&validate(&create(marked.clone())))["allowed"],
        true
    );
    let mut forged = marked.clone();
    forged["metadata"]["annotations"]["bookend.dev/injected"] =
        json!(r#"{"policies":[],"resolved":true}"#);
    let m = denial_message(&validate(&create(forged)));
    assert!(
        m.contains("changed /metadata/annotations/bookend.dev~1injected"),
        "{m}"
    );
    // A TaskRun nothing is injected into may not carry the label: here a remote one in a
    // namespace no policy reaches.
    let mut elsewhere = remote.clone();
    elsewhere["metadata"]["labels"] = json!({"bookend.dev/verify": "true"});
    let none = PolicySet::default();
    let m = denial_message(&review(
        Endpoint::Validate,
        &create(elsewhere),
        &none,
        &Catalog::default(),
    ));
    assert!(
        m.contains("unexpected /metadata/labels/bookend.dev~1verify"),
        "{m}"
    );
}

fn policy_review(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "p1", "operation": "CREATE",
                    "kind": {"group": "bookend.dev", "version": "v1alpha1", "kind": "ClusterStepPolicy"},
                    "object": object}
    }))
    .unwrap()
}

#[test]
fn policy_objects_are_validated_with_field_paths() {
    let bad = json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
        "metadata": {"name": "bad"},
        "spec": {"preSteps": [{"name": "creds", "image": "alpine"}]}});
    let m = denial_message(&validate(&policy_review(bad)));
    assert!(
        m.contains(
            "spec.preSteps[0].name: step name \"creds\" must start with the reserved prefix"
        ),
        "{m}"
    );

    let clash = json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
        "metadata": {"name": "other"},
        "spec": {"preSteps": [{"name": "bookend-creds", "image": "alpine"}]}});
    let m = denial_message(&validate(&policy_review(clash)));
    assert!(m.contains("already used by ClusterStepPolicy/creds"), "{m}");

    // Updating the policy that owns the name is fine.
    let same = json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
        "metadata": {"name": "creds"},
        "spec": {"preSteps": [{"name": "bookend-creds", "image": "alpine:3"}]}});
    assert_eq!(response(&validate(&policy_review(same)))["allowed"], true);

    let typo = json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
        "metadata": {"name": "t"}, "spec": {"postStepRun": "Always"}});
    let m = denial_message(&validate(&policy_review(typo)));
    assert!(
        m.contains("spec.postStepRun") || m.contains("unknown field"),
        "{m}"
    );
}

#[test]
fn other_resources_are_allowed() {
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "c", "operation": "CREATE",
                    "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                    "object": {"apiVersion": "v1", "kind": "ConfigMap"}}
    }))
    .unwrap();
    let reply = mutate(&body);
    assert!(reply.answered());
    assert_eq!(response(&reply)["allowed"], true);
}

#[test]
fn the_real_apiserver_sample_is_mutated() {
    let body = include_bytes!("../../tests/fixtures/admission-review-taskrun-pipeline.json");
    let reply = mutate(body);
    assert!(reply.answered(), "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.summary.outcome, Some(Outcome::Mutated));
}

#[test]
fn the_controllers_dry_run_task_create_is_injected() {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task", "metadata": {"name": "x"},
                      "spec": {"steps": [{"name": "build", "image": "go"}]}});
    let body = |user: &str, dry_run: bool| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "t", "operation": "CREATE", "namespace": "team-a", "dryRun": dry_run,
                        "kind": {"group": "tekton.dev", "version": "v1", "kind": "Task"},
                        "userInfo": {"username": user}, "object": task}
        }))
        .unwrap()
    };
    let controller = crate::policy::DEFAULT_TEKTON_CONTROLLER;
    let r = response(&mutate(&body(controller, true)));
    assert_eq!(decoded_patch(&r)[1]["path"], "/spec/steps/0");
    for (user, dry_run) in [("alice", true), (controller, false)] {
        let r = response(&mutate(&body(user, dry_run)));
        assert!(r.get("patch").is_none(), "{user} {dry_run}");
    }
}

#[test]
fn the_answer_is_the_admission_review_the_api_expects() {
    use base64::Engine as _;
    let parsed = |answer: &Answer| -> Value {
        serde_json::from_slice(&review_response("admission.k8s.io/v1", "u-1\"x", answer))
            .expect("the answer is JSON")
    };
    assert_eq!(
        parsed(&Answer::allow()),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "response": {"uid": "u-1\"x", "allowed": true}})
    );
    let denied = Answer {
        warnings: vec!["w \"1\"\n".to_owned(), "w2".to_owned()],
        ..Answer::deny("spec.taskSpec.steps[0].name: \"bad\"\tname".to_owned())
    };
    assert_eq!(
        parsed(&denied)["response"],
        json!({"uid": "u-1\"x", "allowed": false,
               "status": {"message": "spec.taskSpec.steps[0].name: \"bad\"\tname", "code": 400, "reason": "BadRequest"},
               "warnings": ["w \"1\"\n", "w2"]})
    );
    // Every length of the last base64 group (padding "==", "=", none).
    for patch in [&b"[{}]"[..], b"[{}] ", b"[{}]  "] {
        let mutated = Answer {
            outcome: Outcome::Mutated,
            patch: Some(patch.to_vec()),
            audit_annotations: BTreeMap::from([
                ("audit".to_owned(), "a,b".to_owned()),
                ("injected".to_owned(), "x (y)".to_owned()),
            ]),
            ..Answer::allow()
        };
        let response = &parsed(&mutated)["response"];
        assert_eq!(
            response,
            &json!({"uid": "u-1\"x", "allowed": true, "patchType": "JSONPatch",
                    "patch": base64::engine::general_purpose::STANDARD.encode(patch),
                    "auditAnnotations": {"audit": "a,b", "injected": "x (y)"}})
        );
    }
}

#[test]
fn the_backstop_hands_over_the_admitted_taskrun_for_events_and_reports() {
    // What the mutating webhook made of the TaskRun, as the apiserver sends it to /validate:
    // with its generated name and uid.
    let mut injected = crate::engine::decide(
        crate::engine::Request {
            object: &taskrun(),
            namespace: "team-a",
            dry_run: false,
        },
        &set(),
        &Catalog::default(),
    )
    .object;
    injected["metadata"]["name"] = json!("x-7f2kq");
    injected["metadata"]["uid"] = json!("2b9c7b8e-0000-4000-8000-000000000001");
    let reply = validate(&create(injected.clone()));
    assert_eq!(reply.summary.outcome, Some(Outcome::Admitted));
    let admitted = reply.summary.admitted.expect("an admitted TaskRun");
    assert_eq!(admitted.object, injected);
    assert_eq!(admitted.namespace, "team-a");
    // Not for dry runs, refusals, or the mutating webhook (no name or uid yet).
    let dry = validate(&review_body("CREATE", injected.clone(), true));
    assert!(dry.summary.admitted.is_none());
    let refused = validate(&create(taskrun()));
    assert_eq!(refused.summary.outcome, Some(Outcome::Denied));
    assert!(refused.summary.admitted.is_none());
    assert!(mutate(&create(taskrun())).summary.admitted.is_none());
}

#[test]
fn each_request_gets_one_route() {
    use Endpoint::{Mutate, Validate, ValidatePods};
    let controller = crate::policy::DEFAULT_TEKTON_CONTROLLER;
    // "group Kind OPERATION [dryRun] [controller] [status]"; group "-" is the core group.
    let route = |endpoint, request: &str| {
        let words: Vec<&str> = request.split(' ').collect();
        let has = |word| words.contains(&word);
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": words[2], "dryRun": has("dryRun"),
                        "kind": {"group": words[0].trim_matches('-'), "version": "v1", "kind": words[1]},
                        "userInfo": {"username": if has("controller") { controller } else { "alice" }},
                        "subResource": if has("status") { "status" } else { "" }}});
        let read = wire::read(&serde_json::to_vec(&body).unwrap()).unwrap();
        Route::of(endpoint, &read.request.unwrap(), controller)
    };
    let backstop = |hand_over| Route::TaskRun(TaskRunCheck::Backstop { hand_over });
    for (endpoint, request, want) in [
        (
            Mutate,
            "tekton.dev TaskRun CREATE",
            Route::TaskRun(TaskRunCheck::Inject),
        ),
        (Validate, "tekton.dev TaskRun CREATE", backstop(true)),
        (
            Validate,
            "tekton.dev TaskRun CREATE dryRun",
            backstop(false),
        ),
        (ValidatePods, "tekton.dev TaskRun CREATE", backstop(false)),
        (Mutate, "tekton.dev TaskRun UPDATE", Route::Other),
        (Validate, "tekton.dev TaskRun UPDATE", Route::TaskRunUpdate),
        (
            Validate,
            "tekton.dev TaskRun UPDATE status",
            Route::Subresource,
        ),
        (ValidatePods, "tekton.dev TaskRun UPDATE", Route::Other),
        (
            Validate,
            "tekton.dev TaskRun CREATE status",
            Route::Subresource,
        ),
        (
            Mutate,
            "tekton.dev Task CREATE dryRun controller",
            Route::ResolvedTask,
        ),
        (Mutate, "tekton.dev Task CREATE dryRun", Route::Other),
        (Mutate, "tekton.dev Task CREATE controller", Route::Other),
        (
            Validate,
            "tekton.dev Task CREATE dryRun controller",
            Route::Other,
        ),
        (
            Validate,
            "bookend.dev StepPolicy UPDATE",
            Route::PolicyObject,
        ),
        (Mutate, "bookend.dev StepPolicy UPDATE", Route::Other),
        (ValidatePods, "- Pod CREATE", Route::Pod),
        (ValidatePods, "- Pod CREATE status", Route::Pod),
        (Validate, "- Pod CREATE", Route::Other),
    ] {
        assert_eq!(route(endpoint, request), want, "{endpoint:?} {request}");
    }
}
