//! The cluster, as the scenarios drive it: kubectl calls on `Cluster` that return kubectl's
//! result for the scenarios to assert on, and dry runs polled until bookend has caught up.

use std::time::Duration;

use serde_json::Value;

use crate::kube::{Cluster, Out, poll};

use super::objects::step_names;

/// The e2e suite's kubectl calls: most return kubectl's result, for the scenarios to assert on.
impl Cluster {
    pub(super) fn kubectl(&self, args: &[&str]) -> Out {
        self.kubectl.run(args, None)
    }

    /// `kubectl get <args...> -o json`, which must succeed.
    #[track_caller]
    pub(super) fn get_json(&self, args: &[&str], what: &str) -> Value {
        let args = [&["get"], args, &["-o", "json"]].concat();
        self.kubectl(&args).expect_ok(what).json()
    }

    pub(super) fn with_object(&self, verb: &[&str], object: &Value) -> Out {
        self.kubectl.with_object(verb, object)
    }

    pub(super) fn dry_run(&self, object: &Value) -> Out {
        self.with_object(&["create", "--dry-run=server"], object)
    }

    pub(super) fn create(&self, object: &Value) -> Out {
        self.with_object(&["create"], object)
    }

    pub(super) fn apply(&self, object: &Value) -> Out {
        self.with_object(&["apply"], object)
    }

    /// Dry-run creates `object` until `check` accepts the result (policies, Tasks and webhook
    /// configurations reach bookend or the apiserver asynchronously).
    pub(super) fn poll_dry_run(
        &self,
        what: &str,
        object: &Value,
        check: impl Fn(&Out) -> Result<(), String>,
    ) -> Out {
        poll(what, Duration::from_secs(30), || {
            let out = self.dry_run(object);
            check(&out).map(|()| out)
        })
    }

    /// `poll_dry_run` until the returned TaskRun's step names satisfy `done`.
    pub(super) fn poll_steps(
        &self,
        what: &str,
        object: &Value,
        done: impl Fn(&[String]) -> bool,
    ) -> Out {
        self.poll_dry_run(what, object, |out| {
            let steps = step_names(&out.try_json()?);
            if done(&steps) {
                Ok(())
            } else {
                Err(format!("steps {steps:?}"))
            }
        })
    }
}
