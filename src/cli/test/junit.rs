//! JUnit XML for CI systems (GitLab, Jenkins, GitHub test reporters): one `testsuite` per
//! `Test`, one `testcase` per expectation, a `failure` with the reasons. Written by
//! quick-junit (escaping, control characters, the attribute set CI tools read).

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::suite::CaseResult;

/// One suite's results: (test file, test name, cases).
pub type SuiteResults<'a> = (&'a str, &'a str, &'a [CaseResult]);

/// The JUnit XML document.
pub fn render(suites: &[SuiteResults<'_>]) -> Result<String, quick_junit::SerializeError> {
    let mut report = Report::new("bookend test");
    for (file, name, cases) in suites {
        let mut suite = TestSuite::new(*name);
        suite.extra.insert("file".into(), (*file).into());
        for case in *cases {
            let status = match case.failures.first() {
                None => TestCaseStatus::success(),
                Some(first) => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status
                        .set_message(first.as_str())
                        .set_description(case.failures.join("\n"));
                    status
                }
            };
            let mut test_case = TestCase::new(case.name.as_str(), status);
            test_case.set_classname(*name);
            suite.add_test_case(test_case);
        }
        report.add_test_suite(suite);
    }
    report.to_string()
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
        let xml = render(&[("t/bookend-test.yaml", "t", &cases)]).unwrap();
        assert!(xml.contains("name=\"bookend test\""), "{xml}");
        assert!(
            xml.contains("<testsuites name=\"bookend test\" tests=\"2\"")
                && xml.contains("failures=\"1\""),
            "{xml}"
        );
        assert!(
            xml.contains("<testcase name=\"team-a/build-\" classname=\"t\""),
            "{xml}"
        );
        assert!(xml.contains("file=\"t/bookend-test.yaml\""), "{xml}");
        assert!(xml.contains("<testcase name=\"a&lt;b\""), "{xml}");
        assert!(
            xml.contains("message=\"result: expected &quot;x&quot; &amp; y\""),
            "{xml}"
        );
        // No raw control character reaches the XML (XML 1.0 forbids them).
        assert!(!xml.contains('\u{1}'), "{xml}");
    }
}
