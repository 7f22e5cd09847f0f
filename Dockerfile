# The agentfleet image: agentfleet-dispatcher, agentfleet-worker and agentctl on Debian 12.
#
# Build from the repository root (VERSION only fills the image's version label):
#   docker build -t agentfleet:VERSION --build-arg VERSION=VERSION .
#
# Stages:
#   build    debian:12; tools/setup installs the build packages (its list is the only one:
#            this file keeps no second copy), then CMake + Ninja build the release kind of
#            the three binaries (tools/build's release flags, tests off); debug info is
#            stripped (symbols kept, so backtraces still name functions).
#   runtime  debian:12-slim; only the shared libraries the three binaries link against,
#            plus ca-certificates (HTTPS model endpoints, Kafka TLS) and tzdata (the worker
#            reads IANA zones from /usr/share/zoneinfo). Binaries in /usr/local/bin.
#
# Runs as the non-root user agentfleet, UID and GID 10001 (the Helm chart's runAsUser /
# runAsGroup, runAsNonRoot); it needs no home and writes nothing to the image.
#
# No configuration is baked in: the chart mounts a ConfigMap at /etc/agentfleet/, and
# AGENTFLEET_CONFIG (read by the dispatcher and the worker, core/config/config.cpp) points
# at /etc/agentfleet/agentfleet.yaml. A relative system_prompt_file is read from that
# folder; without one the built-in prompt (the same text as config/system-prompt.zh.md) is
# used, so the prompt file is not copied either.
#
# Command: no ENTRYPOINT; CMD is the worker only so that a bare `docker run` does something
# sensible. The chart always sets `command:` (which replaces CMD):
#   [agentfleet-dispatcher, serve]    [agentfleet-worker]    [agentfleet-dispatcher, migrate]
#
# tests/helm/dockerfile_test.sh checks this file against tools/setup and the built binaries
# (runtime packages cover every shared library; user; copied binaries).

FROM debian:12 AS build
WORKDIR /src
# tools/setup alone first, so the package layer survives source changes.
COPY tools/setup tools/setup
RUN tools/setup
COPY CMakeLists.txt ./
COPY cmake cmake
COPY schemas schemas
COPY core core
COPY dispatcher dispatcher
COPY worker worker
COPY tools tools
# The web console, built into the dispatcher (npm and esbuild; tools/build-console), and the
# TypeScript client it calls the API through.
COPY ui ui
COPY clients/typescript/src clients/typescript/src
RUN cmake -S . -B build/release -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTFLEET_SANITIZE=OFF -DAGENTFLEET_TSAN=OFF \
      -DAGENTFLEET_TESTS=OFF \
 && cmake --build build/release --target agentfleet-dispatcher agentfleet-worker agentctl \
 && mkdir -p /out \
 && strip --strip-debug -o /out/agentfleet-dispatcher build/release/dispatcher/agentfleet-dispatcher \
 && strip --strip-debug -o /out/agentfleet-worker build/release/worker/agentfleet-worker \
 && strip --strip-debug -o /out/agentctl build/release/tools/agentctl/agentctl

FROM debian:12-slim AS runtime
ARG VERSION=dev
ARG DEBIAN_FRONTEND=noninteractive
LABEL org.opencontainers.image.title="agentfleet" \
      org.opencontainers.image.description="agentfleet: runs LLM agent tasks at fleet scale (agentfleet-dispatcher, agentfleet-worker, agentctl)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.base.name="debian:12-slim"
# The libraries the binaries link against, by Debian package (libssl3 holds libssl and
# libcrypto; libpqxx-6.4 brings libpq5 and its Kerberos/LDAP libraries; librdkafka1 brings
# liblz4, libzstd, libsasl2 and zlib).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libyaml-cpp0.7 librdkafka1 libpqxx-6.4 libssl3 libprometheus-cpp-core1.0 \
      ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 agentfleet \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin agentfleet
COPY --from=build /out/agentfleet-dispatcher /out/agentfleet-worker /out/agentctl /usr/local/bin/
ENV AGENTFLEET_CONFIG=/etc/agentfleet/agentfleet.yaml
# HTTP API (dispatcher) and Prometheus metrics, the ports of config/production.example.yaml.
EXPOSE 8080 9464
USER 10001:10001
CMD ["agentfleet-worker"]
