//! A Tekton line of `BOOKEND_TEKTON_VERSIONS` (the runtime and e2e suites run against each):
//! a release and the feature flags set on top of its defaults.

use bookend::tekton::cluster::{Cluster, Feature, FeatureFlags, Lack, NEWEST, Version};

/// One Tekton release with the feature flags set on top of its defaults.
#[derive(Clone, Debug)]
pub struct Line {
    pub version: String,
    pub flags: Vec<(String, String)>,
    pub cluster: Cluster,
}

#[allow(dead_code)] // each suite that includes this file uses a part of it
impl Line {
    /// `v0.62.3` or `v0.62.3+enable-step-actions=true` (flags joined with `+`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.trim().split('+');
        let version = parts.next().unwrap_or_default().to_owned();
        let parsed: Version = version.parse().map_err(|e| format!("{e}"))?;
        let mut flags = Vec::new();
        let mut model = FeatureFlags::default();
        for flag in parts {
            let (key, value) = flag
                .split_once('=')
                .ok_or_else(|| format!("{flag:?}: expected KEY=VALUE"))?;
            model.set(key, value).map_err(|e| format!("{e}"))?;
            flags.push((key.to_owned(), value.to_owned()));
        }
        Ok(Self {
            version,
            flags,
            cluster: Cluster {
                version: parsed,
                flags: model,
            },
        })
    }

    /// `BOOKEND_TEKTON_VERSIONS`, comma-separated; the newest Tekton when unset.
    pub fn from_env() -> Vec<Self> {
        let text = std::env::var("BOOKEND_TEKTON_VERSIONS").unwrap_or_else(|_| NEWEST.to_string());
        text.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                Self::parse(s).unwrap_or_else(|e| {
                    panic!("BOOKEND_TEKTON_VERSIONS: {s:?}: {e} (e.g. v1.15.0,v0.62.3,v0.62.3+enable-step-actions=true)")
                })
            })
            .collect()
    }

    /// The flags as Tekton's feature-flags ConfigMap would say them, or `defaults`.
    pub fn describe_flags(&self) -> String {
        if self.flags.is_empty() {
            return "defaults".to_owned();
        }
        self.flags
            .iter()
            .map(|(k, v)| format!("{k}: \"{v}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn label(&self) -> String {
        format!("Tekton {} ({})", self.version, self.describe_flags())
    }

    /// The newest Tekton with its defaults: the line the suite always ran.
    pub fn is_default(&self) -> bool {
        self.flags.is_empty() && self.cluster.version == NEWEST
    }

    /// `lacking`, briefly: each feature with the flag that enables it (or the release that
    /// has it).
    pub fn lacking_briefly(&self, needs: &[Feature]) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for lack in needs.iter().filter_map(|f| self.cluster.lacks(*f)) {
            let text = match &lack {
                Lack::Flag {
                    feature,
                    flag,
                    value,
                    ..
                } => format!("{} ({flag}: \"{value}\")", feature.describe()),
                Lack::Version { feature, since, .. } => {
                    format!("{} (Tekton {since} or later)", feature.describe())
                }
            };
            if !all.contains(&text) {
                all.push(text);
            }
        }
        all
    }

    /// What of `needs` this line's Tekton refuses or lacks, with the fix.
    pub fn lacking(&self, needs: &[Feature]) -> Vec<String> {
        needs
            .iter()
            .filter_map(|f| self.cluster.lacks(*f))
            .map(|lack| lack.to_string())
            .fold(Vec::new(), |mut all, lack| {
                if !all.contains(&lack) {
                    all.push(lack);
                }
                all
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_flags() {
        let line = Line::parse("v0.62.3+enable-step-actions=true").unwrap();
        assert_eq!(line.version, "v0.62.3");
        assert!(line.lacking(&[Feature::StepWhen]).is_empty());
        let line = Line::parse("v0.62.3").unwrap();
        assert_eq!(line.lacking(&[Feature::StepWhen]).len(), 1);
        assert!(Line::parse("v0.62.3+enable-step-actions").is_err());
        assert!(Line::parse("devel").is_err());
    }
}
