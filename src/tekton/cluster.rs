//! What a Tekton cluster can run: its version and the feature flags the injected steps depend
//! on. Pure: the facts come from Tekton's `pipelines-info` and `feature-flags` ConfigMaps (or the
//! command line), and the answers are the version boundaries read in Tekton's source
//! (`pkg/apis/pipeline/v1/task_validation.go`, `container_validation.go`, `when_validation.go`
//! and `config/config-feature-flags.yaml` at each release tag; docs/compatibility.md).

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// A Tekton Pipelines release, `v<major>.<minor>.<patch>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

/// The oldest Tekton bookend supports: step `when` first shipped in v0.62.0, and v0.62 is also
/// where the controller's dry-run of a resolved Task returns the mutated object and a TaskRun's
/// spec became immutable after creation.
pub const OLDEST_SUPPORTED: Version = Version::new(0, 62, 0);
/// The newest Tekton the suites run (`bookend version`'s TESTED_TEKTON); the default offline.
pub const NEWEST: Version = Version::new(1, 15, 0);
/// Since v1.0.0 StepActions, step `results` and step `when` no longer depend on
/// `enable-step-actions` (the flag is a no-op).
const STEP_ACTIONS_GA: Version = Version::new(1, 0, 0);
/// Step `when` first shipped in v0.62.0.
const STEP_WHEN: Version = Version::new(0, 62, 0);
/// The `cluster` resolver answers `kind: stepaction` since v0.63.0; v0.62's refuses it
/// (`unknown or unsupported resource kind 'stepaction'`, in
/// `pkg/resolution/resolver/cluster/resolver.go`), and the TaskRun fails at resolution.
const CLUSTER_RESOLVER_STEP_ACTIONS: Version = Version::new(0, 63, 0);
/// ClusterTask was removed in v1.0.0; before, `taskRef.kind: ClusterTask` (without a
/// resolver) runs the cluster-scoped ClusterTask of that name (`GetTaskFunc` in
/// `pkg/reconciler/taskrun/resources/taskref.go`).
const CLUSTER_TASK_REMOVED: Version = Version::new(1, 0, 0);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A version that is not `v<major>.<minor>[.<patch>]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a Tekton version: expected v<major>.<minor>[.<patch>], as Tekton's pipelines-info ConfigMap says it (e.g. v0.62.3)"
)]
pub struct BadVersion(pub String);

impl FromStr for Version {
    type Err = BadVersion;

    /// Parses `v0.62.3`, `0.62`, and release builds' suffixes (`v1.0.0-rc.1`, `v0.62.3+abc`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadVersion(text.to_owned());
        let trimmed = text.trim();
        let core = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut number = |required: bool| -> Result<u32, BadVersion> {
            match parts.next() {
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                    p.parse().map_err(|_| bad())
                }
                None if !required => Ok(0),
                _ => Err(bad()),
            }
        };
        let version = Version::new(number(true)?, number(true)?, number(false)?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(version)
    }
}

/// Tekton's `enable-api-fields`: which API fields its webhook admits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiFields {
    Stable,
    /// Tekton's default.
    #[default]
    Beta,
    Alpha,
}

impl ApiFields {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stable => "stable",
            Self::Beta => "beta",
            Self::Alpha => "alpha",
        }
    }
}

/// The feature flags (Tekton's `feature-flags` ConfigMap) that decide whether Tekton admits
/// what bookend injects. Absent keys take Tekton's defaults, which do not change within the
/// supported versions for these keys except `enable-step-actions` (see [`Cluster`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureFlags {
    /// `enable-step-actions`; `None`: not set, the version's default (`false` before v1.0).
    pub enable_step_actions: Option<bool>,
    pub enable_api_fields: ApiFields,
    pub enable_cel_in_when_expression: bool,
    /// `disable-inline-spec` lists `taskrun`: Tekton refuses TaskRuns with `spec.taskSpec`.
    pub inline_task_spec_refused: bool,
}

/// A feature flag with a value Tekton does not accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("feature flag {key}: {value:?} is not one of {expected}")]
pub struct BadFlag {
    pub key: String,
    pub value: String,
    pub expected: &'static str,
}

/// The flags bookend reads; other keys of the ConfigMap are left alone.
pub const KNOWN_FLAGS: &[&str] = &[
    "enable-step-actions",
    "enable-api-fields",
    "enable-cel-in-whenexpression",
    "disable-inline-spec",
];

impl FeatureFlags {
    /// Sets one flag as Tekton reads it from its ConfigMap. Keys bookend does not depend on are
    /// ignored (`Ok(false)`); a value Tekton would not accept is an error.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, BadFlag> {
        let bad = |expected| BadFlag {
            key: key.to_owned(),
            value: value.to_owned(),
            expected,
        };
        let boolean = || match value.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad("true, false")),
        };
        match key {
            "enable-step-actions" => self.enable_step_actions = Some(boolean()?),
            "enable-cel-in-whenexpression" => self.enable_cel_in_when_expression = boolean()?,
            "enable-api-fields" => {
                self.enable_api_fields = match value.trim() {
                    "stable" => ApiFields::Stable,
                    "beta" => ApiFields::Beta,
                    "alpha" => ApiFields::Alpha,
                    _ => return Err(bad("stable, beta, alpha")),
                }
            }
            "disable-inline-spec" => {
                self.inline_task_spec_refused = value
                    .split(',')
                    .any(|kind| kind.trim().eq_ignore_ascii_case("taskrun"))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The flags of a `feature-flags` ConfigMap object (its `data`).
    pub fn from_config_map(config_map: &Value) -> Result<Self, BadFlag> {
        let mut flags = Self::default();
        if let Some(data) = config_map.get("data").and_then(Value::as_object) {
            for (key, value) in data {
                if let Some(value) = value.as_str() {
                    flags.set(key, value)?;
                }
            }
        }
        Ok(flags)
    }
}

/// What a Tekton cluster can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    pub version: Version,
    pub flags: FeatureFlags,
}

impl Default for Cluster {
    /// The newest supported Tekton with its default flags.
    fn default() -> Self {
        Self {
            version: NEWEST,
            flags: FeatureFlags::default(),
        }
    }
}

/// Something an injected step needs from Tekton.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// Step `when` (bookend's gates for `postStepsRun: Always`, or a policy step's own).
    StepWhen,
    /// Step `results` (the gates write one).
    StepResults,
    /// A step `ref` to a StepAction.
    StepActionRef,
    /// `ref.resolver` on a step (resolver references are beta).
    StepActionResolver,
    /// `ref.resolver: cluster` on a step: the cluster resolver fetching a StepAction.
    StepActionClusterResolver,
    /// Step `workspaces` (isolated workspaces, beta).
    StepWorkspaces,
    /// `stdoutConfig` / `stderrConfig` (alpha).
    StepOutputConfig,
    /// `when[].cel`.
    WhenCel,
}

impl Feature {
    /// How Tekton and bookend's docs name it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::StepWhen => "step when",
            Self::StepResults => "step results",
            Self::StepActionRef => "StepActions (step ref)",
            Self::StepActionResolver => "a resolver in a step ref",
            Self::StepActionClusterResolver => {
                "StepActions from the cluster resolver (kind: stepaction)"
            }
            Self::StepWorkspaces => "step workspaces",
            Self::StepOutputConfig => "step stdoutConfig/stderrConfig",
            Self::WhenCel => "cel in when",
        }
    }
}

/// Why a cluster cannot run a feature, and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lack {
    /// The version does not have it at all.
    Version {
        feature: Feature,
        version: Version,
        since: Version,
    },
    /// A feature flag must be set (before `until`, when given, after which it is always on).
    Flag {
        feature: Feature,
        version: Version,
        flag: &'static str,
        value: &'static str,
        until: Option<Version>,
    },
}

impl Lack {
    pub fn feature(&self) -> Feature {
        match self {
            Self::Version { feature, .. } | Self::Flag { feature, .. } => *feature,
        }
    }

    /// The flag to set, if a flag is the fix (for a metric or status reason).
    pub fn flag(&self) -> Option<&'static str> {
        match self {
            Self::Flag { flag, .. } => Some(flag),
            Self::Version { .. } => None,
        }
    }
}

impl fmt::Display for Lack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version {
                feature,
                version,
                since,
            } => write!(
                f,
                "Tekton {version} has no {} (it first shipped in {since}); upgrade Tekton",
                feature.describe()
            ),
            Self::Flag {
                feature,
                version,
                flag,
                value,
                until,
            } => {
                write!(
                    f,
                    "Tekton {version} refuses {} unless its feature flag {flag} is {value:?}; set {flag}: {value:?} in Tekton's feature-flags ConfigMap",
                    feature.describe()
                )?;
                if let Some(until) = until {
                    write!(f, ", or upgrade Tekton to {until} or later")?;
                }
                Ok(())
            }
        }
    }
}

impl Cluster {
    /// Whether bookend supports this version at all.
    pub fn is_supported(&self) -> bool {
        self.version >= OLDEST_SUPPORTED
    }

    /// Whether `enable-step-actions` is on, with the version's default when it is not set
    /// (`config/config-feature-flags.yaml` ships `"false"` up to v0.70, `"true"` from v1.0).
    pub fn step_actions_enabled(&self) -> bool {
        self.version >= STEP_ACTIONS_GA || self.flags.enable_step_actions == Some(true)
    }

    /// Whether `taskRef.kind: ClusterTask` (without a resolver) runs a ClusterTask here: the
    /// releases before v1.0.0, which still have ClusterTask.
    pub fn has_cluster_tasks(&self) -> bool {
        self.version < CLUSTER_TASK_REMOVED
    }

    /// `None` when the cluster's Tekton admits and runs `feature`; else why not and the fix.
    pub fn lacks(&self, feature: Feature) -> Option<Lack> {
        let version = self.version;
        let api_fields = |level: ApiFields| {
            (self.flags.enable_api_fields < level).then_some(Lack::Flag {
                feature,
                version,
                flag: "enable-api-fields",
                value: level.as_str(),
                until: None,
            })
        };
        match feature {
            Feature::StepWhen if version < STEP_WHEN => Some(Lack::Version {
                feature,
                version,
                since: STEP_WHEN,
            }),
            Feature::StepWhen | Feature::StepResults | Feature::StepActionRef => {
                (!self.step_actions_enabled()).then_some(Lack::Flag {
                    feature,
                    version,
                    flag: "enable-step-actions",
                    value: "true",
                    until: Some(STEP_ACTIONS_GA),
                })
            }
            Feature::StepActionResolver => self
                .lacks(Feature::StepActionRef)
                .or_else(|| api_fields(ApiFields::Beta)),
            Feature::StepActionClusterResolver => {
                self.lacks(Feature::StepActionResolver).or_else(|| {
                    (version < CLUSTER_RESOLVER_STEP_ACTIONS).then_some(Lack::Version {
                        feature,
                        version,
                        since: CLUSTER_RESOLVER_STEP_ACTIONS,
                    })
                })
            }
            Feature::StepWorkspaces => api_fields(ApiFields::Beta),
            Feature::StepOutputConfig => api_fields(ApiFields::Alpha),
            Feature::WhenCel => self.lacks(Feature::StepWhen).or_else(|| {
                (!self.flags.enable_cel_in_when_expression).then_some(Lack::Flag {
                    feature,
                    version,
                    flag: "enable-cel-in-whenexpression",
                    value: "true",
                    until: None,
                })
            }),
        }
    }

    /// The flags as `key=value` (bounded: the keys bookend reads), for logs and `/readyz`.
    pub fn describe_flags(&self) -> String {
        let f = &self.flags;
        format!(
            "enable-step-actions={} enable-api-fields={} enable-cel-in-whenexpression={} disable-inline-spec-taskrun={}",
            self.step_actions_enabled(),
            f.enable_api_fields.as_str(),
            f.enable_cel_in_when_expression,
            f.inline_task_spec_refused
        )
    }
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tekton {} ({})", self.version, self.describe_flags())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(version: &str, flags: &[(&str, &str)]) -> Cluster {
        let mut c = Cluster {
            version: version.parse().unwrap(),
            flags: FeatureFlags::default(),
        };
        for (k, v) in flags {
            c.flags.set(k, v).unwrap();
        }
        c
    }

    #[test]
    fn versions_parse_as_tekton_writes_them() {
        assert_eq!("v0.62.3".parse(), Ok(Version::new(0, 62, 3)));
        assert_eq!("0.62".parse(), Ok(Version::new(0, 62, 0)));
        assert_eq!("v1.0.0-rc.1".parse(), Ok(Version::new(1, 0, 0)));
        assert_eq!(" v1.15.0+dirty ".parse(), Ok(Version::new(1, 15, 0)));
        for bad in ["", "v", "devel", "v1", "v1.x", "v1.2.3.4", "1..2"] {
            assert_eq!(bad.parse::<Version>(), Err(BadVersion(bad.into())), "{bad}");
        }
        assert!(Version::new(0, 70, 0) < Version::new(1, 0, 0));
        assert!(Version::new(0, 9, 0) < Version::new(0, 62, 0));
        assert_eq!(NEWEST.to_string(), "v1.15.0");
    }

    /// The boundaries read at the release tags: before v0.62 no step `when`; v0.62–v0.70 step
    /// `when`, `results` and `ref` only with `enable-step-actions: "true"` (shipped "false");
    /// from v1.0 always.
    #[test]
    fn step_features_follow_the_version_and_enable_step_actions() {
        let old = cluster("v0.61.1", &[("enable-step-actions", "true")]);
        assert!(!old.is_supported());
        assert!(matches!(
            old.lacks(Feature::StepWhen),
            Some(Lack::Version { since, .. }) if since == Version::new(0, 62, 0)
        ));
        assert_eq!(old.lacks(Feature::StepResults), None);

        let lts = cluster("v0.62.3", &[]);
        assert!(lts.is_supported());
        for feature in [
            Feature::StepWhen,
            Feature::StepResults,
            Feature::StepActionRef,
        ] {
            let lack = lts.lacks(feature).expect("needs the flag");
            assert_eq!(lack.flag(), Some("enable-step-actions"));
            assert!(
                lack.to_string().contains(
                    "Tekton v0.62.3 refuses step when unless its feature flag enable-step-actions is \"true\""
                ) || feature != Feature::StepWhen,
                "{lack}"
            );
        }
        assert!(lts.lacks(Feature::StepWhen).unwrap().to_string().ends_with(
            "set enable-step-actions: \"true\" in Tekton's feature-flags ConfigMap, or upgrade Tekton to v1.0.0 or later"
        ));
        let lts_on = cluster("v0.70.0", &[("enable-step-actions", "true")]);
        assert_eq!(lts_on.lacks(Feature::StepWhen), None);
        assert_eq!(lts_on.lacks(Feature::StepActionRef), None);
        let lts_off = cluster("v0.70.0", &[("enable-step-actions", "false")]);
        assert!(lts_off.lacks(Feature::StepResults).is_some());

        // From v1.0 the flag is a no-op, even set to "false".
        let v1 = cluster("v1.0.0", &[("enable-step-actions", "false")]);
        assert_eq!(v1.lacks(Feature::StepWhen), None);
        assert_eq!(v1.lacks(Feature::StepActionRef), None);
        assert_eq!(Cluster::default().lacks(Feature::StepWhen), None);
    }

    #[test]
    fn api_field_levels_and_cel_are_flags_on_every_version() {
        let stable = cluster("v1.15.0", &[("enable-api-fields", "stable")]);
        assert_eq!(
            stable.lacks(Feature::StepWorkspaces).and_then(|l| l.flag()),
            Some("enable-api-fields")
        );
        assert!(stable.lacks(Feature::StepActionResolver).is_some());
        assert_eq!(stable.lacks(Feature::StepActionRef), None);
        let beta = Cluster::default();
        assert_eq!(beta.lacks(Feature::StepWorkspaces), None);
        assert!(beta.lacks(Feature::StepOutputConfig).is_some());
        assert_eq!(
            cluster("v1.15.0", &[("enable-api-fields", "alpha")]).lacks(Feature::StepOutputConfig),
            None
        );
        assert_eq!(
            beta.lacks(Feature::WhenCel).and_then(|l| l.flag()),
            Some("enable-cel-in-whenexpression")
        );
        // cel in a step's when needs step when first.
        assert_eq!(
            cluster("v0.62.0", &[("enable-cel-in-whenexpression", "true")])
                .lacks(Feature::WhenCel)
                .and_then(|l| l.flag()),
            Some("enable-step-actions")
        );
    }

    #[test]
    fn flags_are_read_from_the_config_map_and_bad_values_are_named() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "feature-flags", "namespace": "tekton-pipelines"},
            "data": {"enable-step-actions": "true", "enable-api-fields": "alpha",
                     "disable-inline-spec": "pipelinerun, TaskRun", "coschedule": "workspaces"}});
        let flags = FeatureFlags::from_config_map(&cm).unwrap();
        assert_eq!(flags.enable_step_actions, Some(true));
        assert_eq!(flags.enable_api_fields, ApiFields::Alpha);
        assert!(flags.inline_task_spec_refused);
        let mut f = FeatureFlags::default();
        assert_eq!(f.set("enable-step-actions", "TRUE"), Ok(true));
        assert_eq!(f.set("keep-pod-on-cancel", "true"), Ok(false));
        let err = f.set("enable-api-fields", "gamma").unwrap_err();
        assert_eq!(
            err.to_string(),
            "feature flag enable-api-fields: \"gamma\" is not one of stable, beta, alpha"
        );
        assert!(f.set("enable-step-actions", "yes").is_err());
    }
}
