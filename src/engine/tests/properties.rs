//! Properties over generated step lists: injection is idempotent, and the user's steps keep
//! their order and content.

use super::*;
use proptest::prelude::*;

fn arb_step(i: usize) -> impl Strategy<Value = Value> {
    (
        prop::option::of("[a-c]{1,2}"),
        prop::option::of(prop_oneof![Just("continue"), Just("stopAndFail")]),
        prop::bool::ANY,
    )
        .prop_map(move |(name, on_error, refs)| {
            let mut step = json!({"image": format!("img{i}")});
            if let Some(n) = name {
                step["name"] = json!(format!("{n}{i}"));
            }
            if let Some(e) = on_error {
                step["onError"] = json!(e);
            }
            if refs && i > 0 {
                step["script"] = json!(format!("cat /tekton/steps/{}/exitCode", i - 1));
            }
            step
        })
}

fn arb_steps() -> impl Strategy<Value = Vec<Value>> {
    (1usize..6).prop_flat_map(|n| (0..n).map(arb_step).collect::<Vec<_>>())
}

fn strip_bookend(step: &Value) -> Value {
    let mut s = step.clone();
    let o = s.as_object_mut().unwrap();
    if let Some(Value::Array(w)) = o.get_mut("when") {
        w.retain(|w| !w["input"].as_str().unwrap_or("").contains("bookend-gate-"));
        if w.is_empty() {
            o.remove("when");
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn injection_is_idempotent(steps in arb_steps(), always in prop::bool::ANY) {
        let set = policies(if always { ALWAYS } else { PRE_POST });
        let object = taskrun(Value::Array(steps));
        let first = run(&set, &object);
        prop_assert_eq!(first.outcome, Outcome::Mutated);
        prop_assert_eq!(apply(&object, &first.patch), first.object.clone());
        let second = run(&set, &first.object);
        prop_assert!(second.patch.is_empty(), "second pass patched: {:?}", second.patch);
    }

    #[test]
    fn user_steps_keep_order_and_content(steps in arb_steps(), always in prop::bool::ANY) {
        let set = policies(if always { ALWAYS } else { PRE_POST });
        let out = run(&set, &taskrun(Value::Array(steps.clone()))).object;
        let users: Vec<Value> = steps_of(&out).iter()
            .filter(|s| !tekton::step_name(s).unwrap_or("").starts_with("bookend-"))
            .cloned().collect();
        prop_assert_eq!(users.len(), steps.len());
        for (before, after) in steps.iter().zip(&users) {
            let mut after = strip_bookend(after);
            let mut before = before.clone();
            // Always may turn stopAndFail into continue; index references shift.
            for s in [&mut after, &mut before] {
                let o = s.as_object_mut().unwrap();
                o.remove("onError");
                o.remove("script");
            }
            prop_assert_eq!(before, after);
        }
    }
}
