//! Field paths and the errors collected at them, after knative's `apis.FieldError`.
//!
//! Tekton builds a path from the inside out: a rule reports `ErrGeneric(msg, "mountPath")` and
//! each caller wraps it, `.ViaFieldIndex("volumeMounts", j)`, then `.ViaIndex(i).ViaField("steps")`.
//! bookend walks the other way, from the outside in, so the path is built as the walk goes down:
//! `at.field("volumeMounts").index(j).field("mountPath")` is knative's
//! `ErrGeneric(…, "mountPath").ViaFieldIndex("volumeMounts", j)` under `at`, and prints the
//! same `spec.preSteps[0].volumeMounts[2].mountPath`.

use std::fmt;

use crate::policy::FieldError;

/// Where a field is, relative to what is being checked (`spec.preSteps[0].ref.name`).
///
/// Values are cheap to extend and never change: each method returns a longer path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path of one field (`spec`); the empty string is the root itself.
    pub fn new(field: &str) -> Self {
        Self(field.to_owned())
    }

    /// The member `name` (knative's `ViaField`): `a` becomes `a.name`.
    #[must_use]
    pub fn field(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self::new(name)
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// The `i`-th item (knative's `ViaIndex`): `a` becomes `a[i]`.
    #[must_use]
    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    /// The item with key `key` (knative's `ViaKey`): `env` becomes `env[HOME]`.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The `i`-th item of member `name` (knative's `ViaFieldIndex`): `a.name[i]`.
    #[must_use]
    pub fn field_index(&self, name: &str, i: usize) -> Self {
        self.field(name).index(i)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The errors a check found, each with its path, in the order found (knative's `Also`).
#[derive(Debug, Default)]
pub struct Errors(Vec<FieldError>);

impl Errors {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `message` at `at`.
    pub fn add(&mut self, at: &FieldPath, message: impl Into<String>) {
        self.0.push(FieldError::new(at.as_str(), message));
    }

    /// Records errors found elsewhere (their paths already complete).
    pub fn extend(&mut self, errors: impl IntoIterator<Item = FieldError>) {
        self.0.extend(errors);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn into_vec(self) -> Vec<FieldError> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_as_tekton_prints_them() {
        let step = FieldPath::new("spec").field("preSteps").index(0);
        assert_eq!(step.to_string(), "spec.preSteps[0]");
        assert_eq!(
            step.field("volumeMounts")
                .index(2)
                .field("mountPath")
                .as_str(),
            "spec.preSteps[0].volumeMounts[2].mountPath"
        );
        assert_eq!(
            step.field_index("when", 1).field("values").as_str(),
            "spec.preSteps[0].when[1].values"
        );
        assert_eq!(
            step.field("env").key("HOME").as_str(),
            "spec.preSteps[0].env[HOME]"
        );
        // The root: the first field has no dot before it.
        assert_eq!(FieldPath::default().field("name").as_str(), "name");
        // Extending never changes the path extended.
        assert_eq!(step.as_str(), "spec.preSteps[0]");
    }

    #[test]
    fn errors_keep_their_order_and_paths() {
        let at = FieldPath::new("spec");
        let mut errors = Errors::new();
        assert!(errors.is_empty());
        errors.add(&at.field("b"), "second field, first error");
        errors.add(&at, format!("{} error", "spec"));
        errors.extend([FieldError::new("x", "from elsewhere")]);
        assert_eq!(errors.len(), 3);
        let v = errors.into_vec();
        assert_eq!(v[0], FieldError::new("spec.b", "second field, first error"));
        assert_eq!(v[1], FieldError::new("spec", "spec error"));
        assert_eq!(v[2].path, "x");
    }
}
