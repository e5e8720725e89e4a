//! Arbitrary bytes → `admission::review` on both endpoints: no panic, an AdmissionReview
//! (HTTP 200) or an error (HTTP 400), and the body is always JSON of the documented shape.
#![no_main]

use bookend::admission::{Endpoint, review};
use bookend_fuzz::{catalog, policies};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let reply = review(endpoint, data, policies(), catalog());
        let body: Value = serde_json::from_slice(&reply.body).expect("the body is JSON");
        if reply.answered() {
            let r = &body["response"];
            assert_eq!(body["kind"], "AdmissionReview");
            assert!(r["uid"].as_str().is_some_and(|u| !u.is_empty()), "{body}");
            assert!(r["allowed"].is_boolean(), "{body}");
            if r["allowed"] == false {
                assert_eq!(r["status"]["code"], 400, "{body}");
                assert!(r["patch"].is_null(), "{body}");
            }
            assert!(reply.summary.outcome.is_some());
        } else {
            assert!(
                body["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{body}"
            );
            assert!(reply.summary.outcome.is_none());
        }
    }
});
