//! The shape of the patch: `add`s at indexes or one `replace` of the steps, other webhooks'
//! edits kept, and the webhook's patch equal to the whole object's diff.

use super::*;

/// Steps inserted among user steps of a realistic size are `add`s at their indexes; the user's
/// steps and their unknown fields are left as they are, and `spec` is never replaced.
#[test]
fn inserted_steps_are_adds_at_indexes() {
    let set = policies(PRE_POST);
    let script = "go build ./... && go vet ./... && go test -race -count=1 ./...\n".repeat(10);
    let object = taskrun(json!([
        {"name": "build", "image": "go", "script": script, "unknownField": {"kept": true}}
    ]));
    let d = run(&set, &object);
    assert_eq!(
        d.patch.iter().map(|op| op.path()).collect::<Vec<_>>(),
        [
            "/metadata/annotations",
            "/metadata/labels",
            "/spec/params",
            "/spec/taskSpec/steps/0",
            "/spec/taskSpec/steps/1",
            "/spec/taskSpec/steps/3",
            "/spec/taskSpec/steps/4"
        ]
    );
    assert!(
        d.patch
            .iter()
            .all(|op| matches!(op, crate::patch::Operation::Add { .. })),
        "{:?}",
        d.patch
    );
    assert_eq!(
        d.object["spec"]["taskSpec"]["steps"][2]["unknownField"],
        json!({"kept": true})
    );
}

/// Where bookend changes many places of the step list (here four small insertions; under
/// Always also `onError` and `when` on each user step), one `replace` of
/// `spec.taskSpec.steps` is cheaper for the API server to apply than an operation per place
/// (docs/apiserver-benchmark.md). The list it writes holds the user's steps as they came,
/// unknown fields included, and it never replaces anything above the steps.
#[test]
fn many_changes_to_the_steps_are_one_replace() {
    let set = policies(PRE_POST);
    let object = taskrun(json!([{"name": "build", "image": "go", "unknownField": {"kept": true}}]));
    let d = run(&set, &object);
    assert_eq!(
        d.patch.iter().map(|op| op.path()).collect::<Vec<_>>(),
        [
            "/metadata/annotations",
            "/metadata/labels",
            "/spec/params",
            "/spec/taskSpec/steps"
        ]
    );
    assert!(matches!(
        &d.patch[3],
        crate::patch::Operation::Replace { .. }
    ));
    assert_eq!(apply(&object, &d.patch), d.object);
    assert_eq!(
        d.object["spec"]["taskSpec"]["steps"][2],
        json!({"name": "build", "image": "go", "unknownField": {"kept": true}})
    );
    // The validating backstop describes what is missing place by place.
    let backstop = decide_backstop(request(&object), &set, &Catalog::default());
    assert_eq!(backstop.patch.len(), 7, "{:?}", backstop.patch);
}

/// Another webhook that runs after bookend changes the TaskRun (a field on a user step, a step
/// of its own); the API server then calls bookend again. bookend's answer keeps both edits,
/// whichever patch shape it sends.
#[test]
fn a_later_webhooks_edits_are_not_clobbered() {
    let (set, object) = always_scenario();
    let admitted = run(&set, &object).object;
    // Only a field of a user step: nothing for bookend to change.
    let mut edited = admitted.clone();
    edited["spec"]["taskSpec"]["steps"][2]["env"] = json!([{"name": "FROM_OTHER", "value": "1"}]);
    assert_settled(&set, &edited);
    // A step put before the org's pre-steps (by the author, or by a webhook after bookend's):
    // bookend's steps are still exactly its own, so they go around it again. With Always the
    // gates check steps by index, so the inserted step makes them no longer bookend's: refused,
    // nothing dropped or moved silently.
    let mut before = edited.clone();
    before["spec"]["taskSpec"]["steps"]
        .as_array_mut()
        .unwrap()
        .insert(
            0,
            json!({"name": "other-webhook", "image": "alpine", "args": ["x"]}),
        );
    let m = denied(&set, &before, "spec.taskSpec.steps[");
    assert!(m.contains("bookend-gate-"), "{m}");
    let set = policies(PRE_POST);
    let mut admitted = run(&set, &build_taskrun()).object;
    admitted["spec"]["taskSpec"]["steps"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "other-webhook", "image": "alpine"}));
    let again = assert_converges(&set, &admitted);
    assert_eq!(names(&again)[0], "bookend-outer-pre");
    assert!(names(&again).contains(&"other-webhook".to_owned()));
}

/// The webhook's patch (built from the injected parts alone) is the diff of the whole admitted
/// object, operation for operation, whatever shape the TaskRun's metadata has.
#[test]
fn the_webhook_patch_equals_the_whole_object_diff() {
    let set = policies(ALWAYS);
    let steps = json!([{"name": "build", "image": "golang"}]);
    let mut shapes = vec![taskrun(steps.clone())];
    for metadata in [
        None,
        Some(Value::Null),
        Some(json!({"name": "x"})),
        Some(json!({"name": "x", "annotations": "not a map"})),
        Some(json!({"name": "x", "annotations": {"a": "b"}})),
        Some(json!({"name": "x", "annotations": {"bookend.dev/injected": "stale"}})),
    ] {
        let mut object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun"});
        if let Some(metadata) = metadata {
            object["metadata"] = metadata;
        }
        object["spec"] = json!({"taskSpec": {"steps": steps.clone()}});
        shapes.push(object);
    }
    // Admitted once already: the second pass only has the record to compare.
    let admitted = run(&set, &taskrun(steps.clone())).object;
    let mut stale = admitted.clone();
    stale["metadata"]["annotations"]["bookend.dev/injected"] = json!("{}");
    shapes.extend([admitted, stale]);
    // Volumes: added to a taskSpec without them, appended to existing ones, and (once the
    // policy no longer applies) removed again, next to members bookend must leave alone.
    let volume_set = policies(WITH_VOLUME);
    let mut with_members = taskrun(steps.clone());
    with_members["spec"]["taskSpec"]["params"] = json!([{"name": "p", "default": "x"}]);
    with_members["spec"]["taskSpec"]["workspaces"] = json!([{"name": "src"}]);
    let mut with_volumes = with_members.clone();
    with_volumes["spec"]["taskSpec"]["volumes"] = json!([{"name": "src", "emptyDir": {}}]);
    let volume_admitted = run(&volume_set, &with_volumes).object;
    let volume_admitted_bare = run(&volume_set, &with_members).object;
    shapes.extend([
        with_members,
        with_volumes,
        volume_admitted,
        volume_admitted_bare,
    ]);
    // No policy applies, but injected steps must be stripped and the record removed.
    let none = policies(
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: other}\nspec:\n  match: {namespaces: [elsewhere]}\n  preSteps: [{name: bookend-x, image: alpine}]\n",
    );
    for object in &shapes {
        for set in [&set, &none, &volume_set] {
            let whole = decide(request(object), set, &Catalog::default());
            let webhook = decide_patch(request(object), set, &Catalog::default());
            assert_eq!(webhook.outcome, whole.outcome);
            assert_eq!(webhook.patch, whole.patch, "{object}");
            if whole.outcome == Outcome::Mutated {
                // Applied by an independent RFC 6902 implementation, the webhook's patch gives
                // the object render admits.
                assert_eq!(apply(object, &webhook.patch), whole.object, "{object}");
            }
        }
    }
}
