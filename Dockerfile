# interlock in a container: the static binary and CA certificates on an
# empty base, running as an unprivileged user (UID 65532), with its state in
# /var/lib/interlock.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t interlock .
#   docker run -p 8740:8740 -v interlock-data:/var/lib/interlock \
#     -v ./interlock.yaml:/etc/interlock/interlock.yaml:ro \
#     -e INTERLOCK_SECRET_FILE=/run/secrets/interlock_secret interlock
#
# The configuration must name API keys: the gateway listens on every
# address of the container, and refuses a non-loopback address without them.
# deploy/chart/image_test.go checks this file's stages, user and build flags
# (the same as make release and .goreleaser.yaml).

FROM golang:1.26 AS build
# Stamped into the binary, as make release does.
ARG VERSION=dev
WORKDIR /src
# Modules first, so that a change of the source reuses their layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# modernc.org/sqlite is pure Go: no C toolchain, no libc at run time.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/interlock ./cmd/interlock \
 && /out/interlock version \
 && mkdir -p /out/data /out/tmp \
 && chmod 1777 /out/tmp

# Nothing but what the binary reads: no shell, no package manager, no libc
# (time zones are built into the binary).
FROM scratch
# CA certificates for rediss://, PostgreSQL over TLS, HTTPS upstreams,
# webhooks and the OAuth issuer.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/interlock /usr/local/bin/interlock
COPY --from=build --chown=65532:65532 /out/data /var/lib/interlock
# os.TempDir(); Kubernetes mounts an emptyDir over it when the root is read-only.
COPY --from=build /out/tmp /tmp
ENV PATH=/usr/local/bin
# No /etc/passwd: the user is a number, the one the Helm chart runs as.
USER 65532:65532
WORKDIR /var/lib/interlock
VOLUME ["/var/lib/interlock"]
EXPOSE 8740
# SIGTERM drains tool calls in flight; SIGHUP reloads the configuration.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/interlock"]
CMD ["serve", "--config", "/etc/interlock/interlock.yaml", "--listen", "0.0.0.0:8740", "--data", "/var/lib/interlock", "--log-format", "json"]
