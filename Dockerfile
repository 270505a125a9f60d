# The seckill service in a small image: compile with cgo (the SQLite driver,
# mattn/go-sqlite3, is C) in the Go image, run on Debian slim as a non-root
# user.
#
#   docker build -t seckill .
#   docker run --rm seckill -h          # flags of serve
#   docker compose up -d --build        # the whole stack: see docker-compose.yml
#
# No "# syntax=" line and no BuildKit-only instructions: it builds with the
# classic builder too, and nothing but the two base images is pulled.

# ---------------------------------------------------------------- build stage
# The -bookworm tag matters: the binary links against the build image's glibc,
# and the plain golang:1.26 tag follows Debian's newest release (trixie, glibc
# 2.41), whose binaries need symbols that bookworm's glibc 2.36 below lacks.
FROM golang:1.26-bookworm AS modules
WORKDIR /src
ENV CGO_ENABLED=1 GOFLAGS=-trimpath
# The module download, in a layer that changes only with go.mod/go.sum.
COPY go.mod go.sum ./
RUN go mod download

# The list of non-standard packages the binary imports. This stage reruns on
# every code change (it needs the code), but it only lists; the list itself
# changes only when an import does.
FROM modules AS deps
COPY . .
RUN go list -deps -f '{{with .Module}}{{if not .Main}}{{$.ImportPath}}{{end}}{{end}}' . >/deps.txt

FROM modules AS build
# Compile the dependencies (about 270 packages, with the SQLite C
# amalgamation: most of the build time) in a layer cached for as long as the
# list above stays the same, so that a code change recompiles only this
# module's own packages.
COPY --from=deps /deps.txt /deps.txt
RUN xargs go build </deps.txt
# Only the main package and what it imports; -s -w drops the symbol table and
# DWARF, -trimpath (GOFLAGS) the build machine's paths.
COPY . .
RUN go build -ldflags="-s -w" -o /out/seckill . \
 && /out/seckill help >/dev/null

# -------------------------------------------------------------- runtime stage
# No ca-certificates: the service speaks plain HTTP and plain Redis, and the
# load tester plain HTTP to the load balancer. No curl either: the compose
# health check needs only bash (see docker-compose.yml).
FROM debian:bookworm-slim
RUN useradd --uid 10001 --user-group --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin seckill \
 && mkdir /data && chown seckill:seckill /data
COPY --from=build /out/seckill /usr/local/bin/seckill
# /data holds the SQLite file (and its -wal and -shm files). A new named
# volume mounted here starts as a copy of this directory, so it is owned by
# seckill too; the replicas of docker-compose.yml share one such volume.
WORKDIR /data
ENV DATABASE=/data/seckill.db
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/seckill"]
CMD ["serve"]
