//! The small parsers the rules share: Go durations and paths, Tekton's variable references,
//! Kubernetes names.

use super::super::select::is_dns_label;

/// Why a Go duration does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("unknown unit {unit:?} in duration {duration:?}")]
    UnknownUnit { unit: String, duration: String },
}

/// Parses a Go duration (`300ms`, `1.5h`, `2h45m`, `-1s`, `0`) into seconds.
pub fn parse_go_duration(s: &str) -> Result<f64, DurationError> {
    let (sign, mut rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0.0);
    }
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| DurationError::MissingUnit(s.to_owned()))?;
        if num_len == 0 {
            return Err(DurationError::Invalid(s.to_owned()));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| DurationError::Invalid(s.to_owned()))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(DurationError::UnknownUnit {
                    unit: unit.to_owned(),
                    duration: s.to_owned(),
                });
            }
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    Ok(sign * total)
}

/// Lexically cleans an absolute path the way Go's `filepath.Clean` does.
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if path.starts_with('/') {
        format!("/{}", parts.join("/"))
    } else if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// Where a container mount at `path` lands: `clean_path` of it rooted at `/`. The API server
/// and Tekton take a relative `mountPath` as written, and the kubelet makes it absolute by
/// putting `/` in front (`makeAbsolutePath` in its `makeMounts`), so `workspace/creds` is
/// `/workspace/creds`.
pub fn mount_point(path: &str) -> String {
    if path.starts_with('/') {
        clean_path(path)
    } else {
        clean_path(&format!("/{path}"))
    }
}

/// The text inside each `$(…)` of `s`, up to the first `)`: Tekton's variables
/// (`params.url`, `params["a.b"]`, `steps.x.results.y`), and a shell's command substitutions
/// (`cat f`) alike; callers tell them apart by prefix.
pub fn references(s: &str) -> impl Iterator<Item = &str> {
    s.match_indices("$(").filter_map(move |(i, _)| {
        let inner = &s[i + 2..];
        inner.find(')').map(|end| &inner[..end])
    })
}

/// Whether `s` references a step result (`$(steps.<step>.results.<name>)`).
pub fn has_step_result_ref(s: &str) -> bool {
    references(s).any(|r| r.starts_with("steps.") && r.contains(".results."))
}

/// Tekton's `ResultNameFormat`: `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`.
pub fn is_result_name(name: &str) -> bool {
    !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A DNS-1123 subdomain-like name: dot-separated DNS labels, at most 253 characters.
pub fn is_qualified_name(name: &str) -> bool {
    name.len() <= 253
        && name
            .split('.')
            .all(|part| !part.is_empty() && part.len() <= 63 && is_dns_label(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_go_duration("300ms").unwrap(), 0.3);
        assert_eq!(parse_go_duration("0").unwrap(), 0.0);
        assert_eq!(parse_go_duration("-2s").unwrap(), -2.0);
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn duration_errors_say_what_is_wrong() {
        let e = |s| parse_go_duration(s).unwrap_err().to_string();
        assert_eq!(e(""), "empty duration");
        assert_eq!(e("10"), "missing unit in duration \"10\"");
        assert_eq!(e("s"), "invalid duration \"s\"");
        assert_eq!(e("1.2.3s"), "invalid duration \"1.2.3s\"");
        assert_eq!(e("5d"), "unknown unit \"d\" in duration \"5d\"");
    }

    #[test]
    fn clean_paths_like_go() {
        assert_eq!(clean_path("/a/./b/../c/"), "/a/c");
        assert_eq!(clean_path("/tekton//home"), "/tekton/home");
        assert_eq!(clean_path("/../x"), "/x");
        assert_eq!(clean_path("a/.."), ".");
        assert_eq!(clean_path("a//b"), "a/b");
    }

    #[test]
    fn mount_points_are_rooted_as_the_kubelet_roots_them() {
        assert_eq!(mount_point("workspace/creds/"), "/workspace/creds");
        assert_eq!(mount_point("./workspace"), "/workspace");
        assert_eq!(mount_point("."), "/");
        assert_eq!(mount_point("../bin"), "/bin");
        assert_eq!(mount_point("/tekton//home"), "/tekton/home");
    }

    #[test]
    fn references_are_the_insides_of_dollar_parens() {
        let refs: Vec<&str> =
            references(r#"echo $(params.a) "$(cat f)" $(params["b.c"]) $(unclosed"#).collect();
        assert_eq!(refs, ["params.a", "cat f", r#"params["b.c"]"#]);
        assert!(has_step_result_ref("x $(steps.a.results.b) y"));
        assert!(!has_step_result_ref("$(steps.a.exitCode.path) .results. )"));
    }

    #[test]
    fn names() {
        assert!(is_result_name("a.b_c-d"));
        assert!(!is_result_name("-a"));
        assert!(!is_result_name("a-"));
        assert!(is_qualified_name("git-clone"));
        assert!(is_qualified_name("a.b"));
        assert!(!is_qualified_name("a..b"));
        assert!(!is_qualified_name("Git"));
    }
}
