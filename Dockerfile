# syntax=docker/dockerfile:1
# Tollbooth Gateway image (SPEC §14). Two stages: the build stage compiles TypeScript with the dev
# dependencies; the runtime stage holds production dependencies and dist/ only, runs as a non-root
# user and needs no writable root filesystem.
#
#   docker build -t tollbooth-gateway .
#   docker run -p 8080:8080 -v $PWD/my.yaml:/etc/tollbooth/tollbooth.yaml:ro tollbooth-gateway
#
# The same image runs the reference research upstream: `node dist/research/http.js`.

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# config/ holds the default tollbooth.yaml and the generated JSON Schema (useful for `check`).
COPY --from=build /app/config ./config
# The config is mounted here (compose: a bind mount; Kubernetes: a ConfigMap volume).
RUN mkdir -p /etc/tollbooth
# Numeric ids so Kubernetes can verify runAsNonRoot without reading /etc/passwd (1000 = "node").
USER 1000:1000
EXPOSE 8080
# No curl in the slim image: node itself asks /healthz. Override TOLLBOOTH_HEALTHCHECK_URL when the
# gateway listens elsewhere (the research upstream overrides the whole healthcheck in compose).
ENV TOLLBOOTH_HEALTHCHECK_URL=http://127.0.0.1:8080/healthz
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch(process.env.TOLLBOOTH_HEALTHCHECK_URL,{signal:AbortSignal.timeout(2000)}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["start", "--config", "/etc/tollbooth/tollbooth.yaml"]
