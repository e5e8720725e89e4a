# syntax=docker/dockerfile:1
#
# The bookend image: one static binary on a distroless base, running as uid 65532.
#
#   docker build -t ghcr.io/bookend-dev/bookend:0.2.0 \
#     --build-arg BOOKEND_COMMIT="$(git rev-parse --short=12 HEAD)" \
#     --build-arg BOOKEND_COMMIT_DATE="$(git log -1 --format=%cs)" .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... --push .
#
# Built by .github/workflows/release.yml on a tag, natively per architecture (linux/amd64 and
# linux/arm64 runners, merged into one index), then signed with cosign; the development
# machines have no container engine. Keep this file simple enough to review by eye; the binary it
# builds is the one `cargo build --release` builds and tests, only linked statically against musl.
#
# Static musl build: bookend's TLS is rustls with ring (no OpenSSL) and the Kubernetes client
# uses rustls too, so nothing needs glibc. The build command below was checked outside a
# container (rust 1.95 + musl-tools, x86_64): a static-pie binary of about 6 MB. Should a dependency ever need it, build for the
# `-gnu` target instead and use gcr.io/distroless/cc-debian12:nonroot as the final stage.
# Pin both base images by digest in a release pipeline.

FROM docker.io/library/rust:1.95-bookworm AS build
# musl-tools: the C compiler ring's assembly and C parts are built with for the musl target.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
# The build platform's own architecture (buildx runs this stage per --platform).
RUN rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
# What `bookend version` prints as its commit (.git is not in the build context).
ARG BOOKEND_COMMIT=""
ARG BOOKEND_COMMIT_DATE=""
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
 && cargo build --release --locked --bin bookend --target "$target" \
 && install -D -m 0555 "target/$target/release/bookend" /out/bookend

# No shell, no package manager, no libc; the `nonroot` user is 65532:65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bookend /usr/local/bin/bookend
USER 65532:65532
# 8443: the webhook (HTTPS); 8080: /livez, /readyz, /metrics (HTTP).
EXPOSE 8443 8080
# The Deployment passes `serve --source=kubernetes ...` as args. Example policies are not copied:
# in the cluster policies are ClusterStepPolicy/StepPolicy objects, and offline use mounts files.
ENTRYPOINT ["/usr/local/bin/bookend"]
CMD ["--help"]
LABEL org.opencontainers.image.title="bookend" \
      org.opencontainers.image.description="Org-wide pre/post steps for Tekton TaskRuns, enforced at admission"
