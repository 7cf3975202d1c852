# onceqd in a container (docs/OPERATIONS.md, "Docker").
#   docker build -t onceq .
#   docker run -p 8080:8080 -v onceq-data:/var/lib/onceq onceq
# The build stage installs packages with scripts/deps.sh and builds with
# scripts/build.sh, as a developer machine does, then packs the .deb with
# cpack; the runtime stage installs that .deb, so its runtime libraries are
# exactly the .deb's Depends (tests/packaging/dockerfile_test.sh checks
# that no other package list creeps in here, and that the image's onceqd
# has raft's commit rule linked).

FROM debian:12 AS build
# release: RocksDB built without assertions (slow, cached in the layer);
# debian: Debian's librocksdb. The same switch as scripts/deps.sh's.
ARG ONCEQ_ROCKSDB=release
WORKDIR /src
# deps.sh and what it runs: the RocksDB build, and the raft a cluster runs
# on (raft-release.sh links third_party/raft/'s commit rule into Debian's
# libraft; configure fails without it). Copied alone so that this layer
# stays cached while the sources change.
COPY scripts/deps.sh scripts/rocksdb-release.sh scripts/raft-release.sh scripts/
COPY third_party/raft third_party/raft
RUN ONCEQ_ROCKSDB=$ONCEQ_ROCKSDB bash scripts/deps.sh
COPY . .
RUN ONCEQ_ROCKSDB=$ONCEQ_ROCKSDB BUILD_DIR=build \
      CMAKE_ARGS="-DONCEQ_BUILD_BENCH=OFF -DONCEQ_BUILD_TESTS=OFF" \
      bash scripts/build.sh onceqd onceq \
 && cd build && cpack -G DEB && cp onceq_*.deb /tmp/onceq.deb

FROM debian:12-slim
COPY --from=build /tmp/onceq.deb /tmp/onceq.deb
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/onceq.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/onceq.deb \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/onceq --no-create-home onceq \
 && install -d -o onceq -g onceq -m 0700 /var/lib/onceq
USER onceq
VOLUME /var/lib/onceq
EXPOSE 8080
# Inside a container the port is published by docker: listen on all
# addresses. Add --auth-file or --config with a mounted file for anything
# reachable from outside the host (docs/SECURITY.md).
ENTRYPOINT ["/usr/bin/onceqd", "--listen", "0.0.0.0:8080", "--data-dir", "/var/lib/onceq"]
