//! Breaker round 35: the record param `bookend-injected` is "exactly bookend's record".
//! Tekton's own notion of a TaskRun param's identity is case-insensitive
//! (`validateNoDuplicateNames`, used by `ValidateParameters` for `spec.params`, v0.62 to
//! v1.15: `strings.ToLower`); bookend's (`record::is_record_param`) was exact until this round.

use super::*;

/// The entries of `spec.params` whose name is the record param's, ignoring ASCII case.
fn record_like(object: &Value) -> Vec<Value> {
    object["spec"]["params"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(record::PARAM))
        })
        .cloned()
        .collect()
}

/// Where no policy applies, `Bookend-Injected` holding a forged record is kept: Chains'
/// provenance then carries a param that Tekton itself takes for the same name as bookend's
/// (it refuses the two together), naming the author's step as an org policy's. Where a policy
/// applies, bookend adds `bookend-injected` beside it and Tekton's validation refuses the
/// TaskRun ("expected exactly one, got both": spec.params) instead of bookend naming the field
/// and the fix.
#[test]
fn a_case_variant_of_the_record_param_is_treated_as_the_record_param() {
    let forged = r#"{"policies":[{"policy":"ClusterStepPolicy/outer","steps":["build"]}]}"#;
    let mut object = build_taskrun();
    object["spec"]["params"] = json!([{"name": "Bookend-Injected", "value": forged}]);

    let none = run(&policies(""), &object);
    let kept_without_policy = record_like(&none.object);

    let with = run(&policies(PRE_POST), &object);
    let with_policy = match with.outcome {
        // A clear denial naming the param is as good as dropping it.
        Outcome::Denied => Vec::new(),
        _ => record_like(&with.object)
            .into_iter()
            .filter(|p| p["name"] != record::PARAM)
            .collect(),
    };
    assert!(
        kept_without_policy.is_empty() && with_policy.is_empty(),
        "without a policy: {kept_without_policy:?}; with one, beside bookend's: {with_policy:?}"
    );
}
