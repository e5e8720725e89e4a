//! The image, as the Dockerfile builds it, against the chart that runs it. There is no container
//! engine here and the installed toolchain has no musl target, so the image itself is not built
//! (the release workflow builds it, tests/workflows.rs checks that workflow); what is checked is
//! the Dockerfile's contract, read as Docker reads it: the binary the build stage builds is the
//! one the final stage copies and runs, as the user and on the ports the chart expects, and the
//! chart's args (without `command`) are a `bookend serve` invocation that binary accepts.

mod common;
#[path = "common/dockerfile.rs"]
mod dockerfile;

use std::process::Command;

use bookend::policy::load::yaml_documents;
use common::root;
use dockerfile::{Stage, stages};
use serde_json::Value;

fn one<'a>(stage: &'a Stage, keyword: &str) -> &'a str {
    let found: Vec<&str> = stage
        .instructions
        .iter()
        .filter(|(k, _)| k == keyword)
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {keyword} in the stage FROM {}",
        stage.from
    );
    found[0]
}

fn chart_deployment() -> Value {
    let text = common::helm_template(
        "bookend",
        "bookend-system",
        &["--show-only", "templates/deployment.yaml"],
    )
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    yaml_documents(&text).unwrap().remove(0)
}

#[test]
fn the_image_runs_the_built_binary_as_the_chart_expects() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stages = stages(&dockerfile);
    assert_eq!(stages.len(), 2, "a build stage and the final image");
    let (build, image) = (&stages[0], &stages[1]);
    assert_eq!(build.name.as_deref(), Some("build"));

    // The build stage builds the `bookend` binary of this workspace, locked, for musl
    // (static: the final image has no libc), and installs it read-only at /out/bookend.
    let run: Vec<&str> = build
        .instructions
        .iter()
        .filter(|(k, _)| k == "RUN")
        .map(|(_, a)| a.as_str())
        .collect();
    let cargo = run
        .iter()
        .find(|r| r.contains("cargo build"))
        .expect("a RUN with cargo build");
    for part in [
        "--release",
        "--locked",
        "--bin bookend",
        "-unknown-linux-musl",
        "install -D -m 0555 \"target/$target/release/bookend\" /out/bookend",
    ] {
        assert!(cargo.contains(part), "the build runs {part}: {cargo}");
    }
    assert!(
        run.iter()
            .any(|r| r.contains("rustup target add") && r.contains("-unknown-linux-musl")),
        "the musl target is added before the build"
    );
    let cargo_toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(
        cargo_toml.contains("name = \"bookend\""),
        "the package builds a binary called bookend"
    );
    let toolchain = build.from.split(':').nth(1).unwrap_or("");
    assert!(
        toolchain.starts_with("1."),
        "a pinned Rust release: {}",
        build.from
    );

    // The final stage: distroless static (no libc, no shell), the binary copied from the build
    // stage to where ENTRYPOINT runs it.
    assert!(
        image.from.starts_with("gcr.io/distroless/static"),
        "{}",
        image.from
    );
    assert!(image.from.ends_with(":nonroot"), "{}", image.from);
    let copy = one(image, "COPY");
    assert_eq!(copy, "--from=build /out/bookend /usr/local/bin/bookend");
    let entrypoint: Vec<String> = serde_json::from_str(one(image, "ENTRYPOINT")).unwrap();
    assert_eq!(
        entrypoint,
        ["/usr/local/bin/bookend"],
        "exec form, the copied binary"
    );
    assert!(
        !image.instructions.iter().any(|(k, _)| k == "RUN"),
        "nothing runs in the final stage (it has no shell)"
    );

    // The chart runs it: no command (the entrypoint), args `serve …`, as the image's user, on
    // the ports the image exposes.
    let deployment = chart_deployment();
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert!(
        container["command"].is_null(),
        "the chart keeps the entrypoint"
    );
    assert_eq!(container["args"][0], "serve");
    let (uid, gid) = one(image, "USER").split_once(':').expect("USER uid:gid");
    let (uid, gid): (i64, i64) = (uid.parse().unwrap(), gid.parse().unwrap());
    assert_eq!((uid, gid), (65532, 65532), "distroless's nonroot user");
    for context in [&pod["securityContext"], &container["securityContext"]] {
        assert_eq!(context["runAsUser"], uid);
        assert_eq!(context["runAsGroup"], gid);
        assert_eq!(context["runAsNonRoot"], true);
    }
    let exposed: Vec<i64> = one(image, "EXPOSE")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let ports: Vec<i64> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    assert_eq!(exposed, ports, "EXPOSE and the chart's container ports");

    // What the container runs, `<entrypoint> <args>`, is a command this bookend accepts: the
    // chart's flags parse (the TLS files aside, which only the pod has: --help parses and
    // checks every flag and value, then exits 0).
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bookend {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
