//! JUnit XML for CI systems (GitLab, Jenkins, GitHub test reporters): one `testsuite` per
//! `Test`, one `testcase` per expectation, a `failure` with the reasons.

use super::suite::CaseResult;

/// One suite's results: (test file, test name, cases).
pub type SuiteResults<'a> = (&'a str, &'a str, &'a [CaseResult]);

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 allows only these control characters.
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The JUnit XML document.
pub fn render(suites: &[SuiteResults<'_>]) -> String {
    let total: usize = suites.iter().map(|(_, _, c)| c.len()).sum();
    let failed: usize = suites
        .iter()
        .map(|(_, _, c)| c.iter().filter(|r| !r.passed()).count())
        .sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"bookend test\" tests=\"{total}\" failures=\"{failed}\">\n"
    ));
    for (file, name, cases) in suites {
        let failures = cases.iter().filter(|r| !r.passed()).count();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" file=\"{}\" tests=\"{}\" failures=\"{failures}\">\n",
            escape(name),
            escape(file),
            cases.len()
        ));
        for case in *cases {
            out.push_str(&format!(
                "    <testcase name=\"{}\" classname=\"{}\"",
                escape(&case.name),
                escape(name)
            ));
            if case.passed() {
                out.push_str("/>\n");
            } else {
                out.push_str(">\n");
                out.push_str(&format!(
                    "      <failure message=\"{}\">{}</failure>\n",
                    escape(&case.failures[0]),
                    escape(&case.failures.join("\n"))
                ));
                out.push_str("    </testcase>\n");
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::test::suite::Expected;

    #[test]
    fn failures_are_escaped_and_counted() {
        let cases = [
            CaseResult {
                name: "team-a/build-".into(),
                outcome: Expected::Mutated,
                injected: vec![],
                failures: vec![],
            },
            CaseResult {
                name: "a<b".into(),
                outcome: Expected::Denied,
                injected: vec![],
                failures: vec!["result: expected \"x\" & y".into(), "more\u{1}".into()],
            },
        ];
        let xml = render(&[("t/bookend-test.yaml", "t", &cases)]);
        assert!(xml.contains("<testsuites name=\"bookend test\" tests=\"2\" failures=\"1\">"));
        assert!(xml.contains("<testcase name=\"team-a/build-\" classname=\"t\"/>"));
        assert!(xml.contains("<testcase name=\"a&lt;b\""));
        assert!(xml.contains(
            "<failure message=\"result: expected &quot;x&quot; &amp; y\">result: expected &quot;x&quot; &amp; y\nmore\u{fffd}</failure>"
        ));
    }
}
